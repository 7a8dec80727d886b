"""What an account may reach beyond the public pages: a verified email address (which the hidden
test splits and a self-serve API token require) and the account's API token."""

from __future__ import annotations

from allauth.account.models import EmailAddress
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from rest_framework.authtoken.models import Token


def has_verified_email(user: AbstractBaseUser) -> bool:
    """Whether ``user`` confirmed an email address (django-allauth)."""
    return EmailAddress.objects.filter(user=user, verified=True).exists()


def api_token(user: AbstractBaseUser) -> Token | None:
    """``user``'s API token (``Authorization: Token <key>``), ``None`` while they have none."""
    return Token.objects.filter(user=user).first()


def new_api_token(user: AbstractBaseUser) -> Token:
    """A fresh API token for ``user``; the one they had stops working."""
    with transaction.atomic():
        Token.objects.filter(user=user).delete()
        return Token.objects.create(user=user)
