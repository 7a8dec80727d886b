"""``Submission.history``: every transition with its attempt, appended and never rewritten (a requeued job
keeps both of its ``queued``/``scoring`` steps). Older rows keep an empty history: their timeline is read
from the ``*_at`` times until their next transition (``Submission._history``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0014_results_version_epoch_per_write"),
    ]

    operations = [
        migrations.AddField(
            model_name="submission",
            name="history",
            field=models.JSONField(
                blank=True, default=list,
                help_text="Every transition, appended in order and never rewritten: state, time (UTC ISO) and attempt."),
        ),
    ]
