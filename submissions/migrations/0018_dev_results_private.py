"""Dev results are private to their owner unless the owner publishes them (issue 36).

Until now an uploaded dev file was public unless its uploader chose otherwise, and the full table (``/leaderboard/``)
listed it under the account's name, while the upload form said that a dev result is on no public board whichever is
chosen. An uploader's dev self-checks already stored are made private here: none was published knowingly. The
platform's own rows (baselines, imported rows) stay as they are. Not reversible: which rows were public before is not
kept.
"""

from django.db import migrations

PUBLIC_SPLITS = ("train", "dev")
"""The splits whose labels are public (``qval.schema.PUBLIC_SPLITS`` when this was written)."""


def dev_results_private(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    Submission = apps.get_model("submissions", "Submission")
    Submission.objects.filter(source="user", split__in=PUBLIC_SPLITS, public=True).update(public=False)


class Migration(migrations.Migration):

    dependencies = [
        ("submissions", "0017_submission_is_a_job_kept_parse"),
    ]

    operations = [migrations.RunPython(dev_results_private, migrations.RunPython.noop)]
