"""One account per mailbox: the rule that maps an email address to the mailbox it delivers to.

A researcher who gets more accounts gets more test submissions a day, and a plus-address
(``ada+2@example.org``) or, at Gmail, a dotted variant (``a.da@gmail.com``) of one's own address is
free to make. So an account is keyed on its *mailbox*, :func:`mailbox`, not on the literal address:
sign-up and adding an email address refuse a mailbox another account holds (:func:`check_free`),
and the unique :class:`accounts.models.Mailbox` row each address claims when it is saved
(:func:`claim_on_save`) refuses it at the database, whatever path the address is stored by.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from accounts.models import Mailbox

MAILBOX_TAKEN = "An account already exists for this mailbox (addresses that differ only in a +tag, or at Gmail in dots, reach one mailbox)."
GMAIL_DOMAINS = frozenset({"gmail.com", "googlemail.com"})


class MailboxTaken(IntegrityError):
    """An email address was stored for an account while another account holds its mailbox."""


def mailbox(email: str) -> str:
    """The mailbox ``email`` delivers to: the address lower-cased, with the ``+tag`` of its local part
    dropped (plus-addressing: every major provider delivers ``name+tag@`` to ``name@``, and the few
    that do not lose nothing but an alias), and at Gmail (``gmail.com``, ``googlemail.com``) the
    dots of the local part dropped and the domain read as ``gmail.com``, as Gmail ignores both."""
    local, _, domain = email.strip().lower().rpartition("@")
    local = local.split("+", 1)[0] or local
    domain = domain.rstrip(".")
    if domain in GMAIL_DOMAINS:
        local, domain = local.replace(".", "") or local, "gmail.com"
    return f"{local}@{domain}"


def check_free(email: str, user: AbstractBaseUser | None = None) -> None:
    """Raise a ``ValidationError`` when an account other than ``user`` holds the mailbox of ``email``."""
    taken = Mailbox.objects.filter(address=mailbox(email))
    if user is not None and user.pk is not None:
        taken = taken.exclude(user_id=user.pk)
    if taken.exists():
        raise ValidationError(MAILBOX_TAKEN, code="mailbox_taken")


def claim_on_save(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Before an email address is stored, claim its mailbox for the address's account; raise
    :class:`MailboxTaken` (the address is not stored) when another account holds it."""
    address = mailbox(instance.email)
    owner, _ = Mailbox.objects.get_or_create(address=address, defaults={"user_id": instance.user_id})
    if owner.user_id != instance.user_id:
        raise MailboxTaken(f"{MAILBOX_TAKEN} ({address!r} belongs to account {owner.user_id})")


def release_on_change(sender: Any, instance: Any, **kwargs: Any) -> None:
    """After an email address is changed or deleted, free the account's mailboxes none of its addresses reach."""
    from allauth.account.models import EmailAddress

    kept = {mailbox(e) for e in EmailAddress.objects.filter(user_id=instance.user_id).values_list("email", flat=True)}
    Mailbox.objects.filter(user_id=instance.user_id).exclude(address__in=kept).delete()
