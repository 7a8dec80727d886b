"""Apply the disclosure rule (:func:`qval.scoring.disclose`) to the results already stored on
hidden splits: per-sample values removed, numbers rounded to what the leaderboard shows.

Irreversible by design: the withheld numbers are gone (they can be recomputed by re-scoring
the stored file, which stores only the disclosed rows again).
"""

from django.db import migrations

from qval.schema import PUBLIC_SPLITS
from qval.scoring import MetricRow, disclose


def disclose_hidden_results(apps, schema_editor):  # type: ignore[no-untyped-def]
    Result = apps.get_model("submissions", "Result")
    fields = ["value", "p_value", "coverage", "details"]
    batch = []
    for result in Result.objects.exclude(submission__split__in=sorted(PUBLIC_SPLITS)).iterator():
        row = MetricRow(metric=result.metric, value=result.value, p_value=result.p_value,
                        num_points=result.num_points, num_dropped=result.num_dropped, coverage=result.coverage,
                        insufficient=result.insufficient, details=result.details or {})
        shown = disclose([row], hidden=True)[0]
        for name in fields:
            setattr(result, name, getattr(shown, name))
        batch.append(result)
        if len(batch) >= 500:
            Result.objects.bulk_update(batch, fields)
            batch = []
    Result.objects.bulk_update(batch, fields)


class Migration(migrations.Migration):

    dependencies = [
        ("submissions", "0003_container_token_usage"),
    ]

    operations = [
        migrations.RunPython(disclose_hidden_results, migrations.RunPython.noop),
    ]
