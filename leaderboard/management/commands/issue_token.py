"""``manage.py issue_token --username NAME``: create the user if needed and print an API token."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Print the API token of a user, creating the user (without a usable password) if needed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True)

    def handle(self, *args: object, **opts: object) -> None:
        user, created = get_user_model().objects.get_or_create(username=str(opts["username"]))
        if created:
            user.set_unusable_password()
            user.save()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
