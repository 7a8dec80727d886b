"""The allauth adapter of the site."""

from __future__ import annotations

from allauth.account.adapter import DefaultAccountAdapter
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from . import mailboxes
from .clients import client_address


class AccountAdapter(DefaultAccountAdapter):
    """allauth's, with the site's client address (sign-up and login rate limits are per address) and its
    address rule (every address a form takes is :func:`accounts.mailboxes.normalise`-d or refused)."""

    def get_client_ip(self, request: HttpRequest) -> str:
        address = client_address(request)
        if not address:
            raise PermissionDenied("Unable to determine the client address")
        return address

    def clean_email(self, email: str) -> str:
        """The address as the account stores it (NFKC, IDNA domain); a form no sign-up needs is refused."""
        return mailboxes.normalise(super().clean_email(email))
