"""``manage.py issue_token --username NAME [--verified-email ADDRESS]``: create the user if needed and
print an API token; with ``--verified-email`` the maintainer vouches for the address, which hidden
splits require (sign-ups confirm theirs by email)."""

from __future__ import annotations

from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from rest_framework.authtoken.models import Token

from accounts.mailboxes import MAILBOX_TAKEN, MailboxTaken, normalise


class Command(BaseCommand):
    help = "Print the API token of a user, creating the user (without a usable password) if needed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True)
        parser.add_argument("--verified-email", default="",
                            help="record this address as verified, so the user may submit to hidden splits")

    def handle(self, *args: object, **opts: object) -> None:
        email = ""
        if opts["verified_email"]:
            try:
                email = normalise(str(opts["verified_email"]))
            except ValidationError as exc:
                raise CommandError(f"{opts['verified_email']}: {' '.join(exc.messages)}") from None
        try:
            with transaction.atomic():
                user, created = get_user_model().objects.get_or_create(username=str(opts["username"]))
                if created:
                    user.set_unusable_password()
                    user.save()
                if email:
                    EmailAddress.objects.update_or_create(user=user, email=email,
                                                          defaults={"verified": True, "primary": True})
                token, _ = Token.objects.get_or_create(user=user)
        except MailboxTaken as exc:
            raise CommandError(f"{opts['verified_email']}: {MAILBOX_TAKEN}") from exc
        self.stdout.write(token.key)
