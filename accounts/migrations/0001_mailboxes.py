"""One account per mailbox: the mailboxes of the existing email addresses.

The oldest address of a mailbox (a verified one first) keeps it; an account whose every address
reaches a mailbox another account already has (a sybil made before this rule) keeps its addresses
but holds no mailbox, and the migration names it so that staff can look at it."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def claim_existing(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    from accounts.mailboxes import mailbox

    EmailAddress = apps.get_model("account", "EmailAddress")
    Mailbox = apps.get_model("accounts", "Mailbox")
    owners: dict[str, int] = {}
    shared: set[int] = set()
    for user_id, email in EmailAddress.objects.order_by("-verified", "pk").values_list("user_id", "email"):
        owner = owners.setdefault(mailbox(email), user_id)
        if owner != user_id:
            shared.add(user_id)
    Mailbox.objects.bulk_create(Mailbox(address=address, user_id=user_id) for address, user_id in owners.items())
    if shared:
        print(f"\n  accounts with an address whose mailbox another account holds (ids): {sorted(shared)}")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("account", "0009_emailaddress_unique_primary_email"),
    ]

    operations = [
        migrations.CreateModel(
            name="Mailbox",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("address", models.CharField(max_length=254, unique=True)),
                ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="mailboxes",
                                           to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.RunPython(claim_existing, migrations.RunPython.noop),
    ]
