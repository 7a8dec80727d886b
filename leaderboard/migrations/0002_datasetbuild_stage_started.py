"""DatasetBuild.stage_started_at and stage_start_done: when the current stage began and its ``done`` then,
for the estimate of the time left (DatasetBuild.seconds_left)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("leaderboard", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="datasetbuild",
            name="stage_started_at",
            field=models.DateTimeField(blank=True, help_text="When the current stage began.", null=True),
        ),
        migrations.AddField(
            model_name="datasetbuild",
            name="stage_start_done",
            field=models.PositiveIntegerField(
                default=0, help_text="'done' at the start of the current stage (a resumed build's checkpointed states)."
            ),
        ),
    ]
