from django.db import migrations, models
from django.db.models import F


def mark_existing_sent(apps, schema_editor):  # type: ignore[no-untyped-def]
    """Rows from before this field had their messages sent when they were made: not sent again."""
    apps.get_model("submissions", "Submission").objects.update(sent_at=F("received_at"))


class Migration(migrations.Migration):

    dependencies = [
        ("submissions", "0009_rescored_predictions_help"),
    ]

    operations = [
        migrations.AddField(
            model_name="submission",
            name="sent_at",
            field=models.DateTimeField(
                blank=True, null=True,
                help_text="When the message of its current state (received or queued) reached the broker; empty "
                          "while unsent (the broker was down): the reaper sends it again."),
        ),
        migrations.RunPython(mark_existing_sent, migrations.RunPython.noop),
    ]
