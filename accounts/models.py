"""The mailboxes that accounts own (accounts.mailboxes)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Mailbox(models.Model):
    """A mailbox (:func:`accounts.mailboxes.mailbox` of an email address) and the one account it belongs to.

    Every email address of an account claims its mailbox; the unique ``address`` is what stops a
    second account, even one signing up at the same moment, from claiming it again."""

    address = models.CharField(max_length=254, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mailboxes")

    def __str__(self) -> str:
        return self.address
