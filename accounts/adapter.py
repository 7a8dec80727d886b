"""The allauth adapter of the site."""

from __future__ import annotations

from allauth.account.adapter import DefaultAccountAdapter
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from .clients import client_address


class AccountAdapter(DefaultAccountAdapter):
    """allauth's, with the site's client address (sign-up and login rate limits are per address)."""

    def get_client_ip(self, request: HttpRequest) -> str:
        address = client_address(request)
        if not address:
            raise PermissionDenied("Unable to determine the client address")
        return address
