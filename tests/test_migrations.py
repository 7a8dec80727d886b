"""The Best-of-N models' move to their own app (issue 21): ``best_of_n/0001`` adopts the tables a database
migrated before the move already has, creates them on a new one, and refuses a database that stopped part-way
through the old ``leaderboard`` history."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder

FIRST = ("best_of_n", "0001_initial")


def migrate(target: tuple[str, str | None]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


def latest() -> tuple[str, str]:
    """The app's newest migration: where each test leaves the database, as the tests after it need it."""
    (leaf,) = MigrationExecutor(connection).loader.graph.leaf_nodes("best_of_n")
    return leaf


@pytest.mark.django_db(transaction=True)
def test_best_of_n_0001_adopts_existing_tables_and_keeps_their_rows() -> None:
    from best_of_n.models import BestOfNRun

    run = BestOfNRun.objects.create(environment="frozenlake", dataset_slug="x", picker="oracle", n=4, num_episodes=8)
    migrate(("best_of_n", None))  # backwards keeps the tables, as a database from before the move has them
    try:
        assert FIRST not in MigrationRecorder(connection).applied_migrations()
        assert "leaderboard_bestofnrun" in connection.introspection.table_names()
        migrate(FIRST)
        assert FIRST in MigrationRecorder(connection).applied_migrations()
    finally:
        migrate(latest())
    assert BestOfNRun.objects.get(pk=run.pk).picker == "oracle"


@pytest.mark.django_db(transaction=True)
def test_best_of_n_0001_refuses_a_database_stopped_part_way_through_the_old_history() -> None:
    recorder = MigrationRecorder(connection)
    migrate(("best_of_n", None))
    recorder.record_applied("leaderboard", "0005_method_family_learned")
    try:
        with pytest.raises(RuntimeError, match="stopped at leaderboard migration 0005_method_family_learned"):
            migrate(FIRST)
    finally:
        recorder.record_unapplied("leaderboard", "0005_method_family_learned")
        migrate(FIRST)
        assert FIRST in recorder.applied_migrations()
        migrate(latest())
