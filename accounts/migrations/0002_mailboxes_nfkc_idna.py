"""One account per mailbox, round three: the mailbox of every stored address recomputed with the
NFKC, quoted-local-part and IDNA rule (accounts.mailboxes.mailbox).

An account that held ``r3w@ｅxample.org`` (full-width ``ｅ``) or ``"r3w"@example.org`` as a mailbox of
its own now reaches ``r3w@example.org``. As in 0001, the oldest address of a mailbox (a verified one
first) keeps it; an account left without a mailbox (a sybil made before this rule) keeps its addresses,
and the migration names it so that staff can look at it."""

from django.db import migrations


def recompute(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    from accounts.mailboxes import mailbox

    EmailAddress = apps.get_model("account", "EmailAddress")
    Mailbox = apps.get_model("accounts", "Mailbox")
    owners: dict[str, int] = {}
    shared: set[int] = set()
    for user_id, email in EmailAddress.objects.order_by("-verified", "pk").values_list("user_id", "email"):
        owner = owners.setdefault(mailbox(email), user_id)
        if owner != user_id:
            shared.add(user_id)
    Mailbox.objects.all().delete()
    Mailbox.objects.bulk_create(Mailbox(address=address, user_id=user_id) for address, user_id in owners.items())
    if shared:
        print(f"\n  accounts with an address whose mailbox another account holds (ids): {sorted(shared)}")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_mailboxes")]

    operations = [migrations.RunPython(recompute, migrations.RunPython.noop)]
