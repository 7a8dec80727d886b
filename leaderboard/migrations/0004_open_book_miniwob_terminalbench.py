"""MiniWoB and TerminalBench are open book (issue 32, item 4: README, *Threat model*): their labels follow
from a state's public row plus public code, as FrozenLake's do. Flag the environments a database already has
(new ones get the flag from their environment folder, qval.envs.registry); their test boards then rank only platform-run rows."""

from django.db import migrations

OPEN_BOOK = ("miniwob", "terminalbench")


def flag(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    apps.get_model("leaderboard", "Environment").objects.filter(slug__in=OPEN_BOOK).update(open_book=True)


def unflag(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    apps.get_model("leaderboard", "Environment").objects.filter(slug__in=OPEN_BOOK).update(open_book=False)


class Migration(migrations.Migration):
    dependencies = [("leaderboard", "0003_fresh_hidden_splits")]

    operations = [migrations.RunPython(flag, unflag)]
