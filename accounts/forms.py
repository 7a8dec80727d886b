"""allauth's sign-up and add-address forms, refusing a mailbox another account holds (accounts.mailboxes)."""

from __future__ import annotations

from typing import Any

from allauth.account import fields as allauth_fields
from allauth.account import forms as allauth_forms
from django.db import transaction
from django.http import HttpRequest
from django.template.response import TemplateResponse

from accounts import mailboxes


class MailboxField(allauth_fields.EmailField):
    """allauth's email field, :func:`accounts.mailboxes.normalise`-d before Django's address check: so
    ``ｒ３ｗ@example.org`` is checked, and refused, as the ``r3w@example.org`` it delivers to, and a form no
    sign-up needs gets its own reason rather than Django's "Enter a valid email address"."""

    def to_python(self, value: Any) -> str:
        value = super().to_python(value)
        return mailboxes.normalise(value) if value else value


class SignupForm(allauth_forms.SignupForm):
    """Sign-up, one account per mailbox."""

    email = MailboxField()

    def clean_email(self) -> str:
        email = super().clean_email()
        mailboxes.check_free(email)
        return email

    def try_save(self, request: HttpRequest) -> tuple[Any, Any]:
        """allauth's, in one transaction: a sign-up that loses the race for its mailbox to another
        (the unique mailbox refuses it) stores nothing and gets the form back with the error."""
        try:
            with transaction.atomic():
                return super().try_save(request)
        except mailboxes.MailboxTaken:
            self.add_error("email", mailboxes.MAILBOX_TAKEN)
            return None, TemplateResponse(request, "account/signup.html", {"form": self})


class AddEmailForm(allauth_forms.AddEmailForm):
    """Adding (or changing to) an email address: not one whose mailbox another account holds."""

    email = MailboxField(required=True)

    def clean_email(self) -> str:
        email = super().clean_email()
        mailboxes.check_free(email, self.user)
        return email
