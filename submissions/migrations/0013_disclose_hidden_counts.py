"""Apply the disclosure rule of issue 20 (:func:`qval.scoring.disclose`) to the results already
stored on hidden splits of the datasets we host: sign agreement withheld; ranking and selection
rows of a file that left states out or dropped candidates withheld; of the others only the
rounded value, with the number of states the file scores in place of the label-dependent counts
(valid and skipped states, unequal pairs).

Rows stored before ``details["num_states"]`` existed take it from the submission's top-1 row,
whose ``num_points`` (states with a scored candidate) depends on the file only.  Their
``coverage`` counted states, not candidates, so a file that scored every state but not every
candidate keeps its rounded mean; a file that scored only some states (the decoded case) loses
it.  Irreversible by design, like ``0004_disclose_hidden_results``.
"""

from django.db import migrations

from qval.schema import PUBLIC_SPLITS
from qval.scoring import MetricRow, disclose


def disclose_hidden_counts(apps, schema_editor):  # type: ignore[no-untyped-def]
    Result = apps.get_model("submissions", "Result")
    fields = ["value", "p_value", "num_points", "num_dropped", "coverage", "insufficient", "details"]
    hidden = Result.objects.filter(submission__dataset__hosted=True).exclude(
        submission__split__in=sorted(PUBLIC_SPLITS))
    states = dict(hidden.filter(metric="top1_accuracy").values_list("submission_id", "num_points"))
    batch = []
    for result in hidden.iterator():
        details = dict(result.details or {})
        if result.metric in ("ranking_spearman", "top1_accuracy", "regret_at_1", "pairwise_accuracy"):
            details.setdefault("num_states", states.get(result.submission_id))
        row = MetricRow(metric=result.metric, value=result.value, p_value=result.p_value,
                        num_points=result.num_points, num_dropped=result.num_dropped, coverage=result.coverage,
                        insufficient=result.insufficient, details=details)
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
        ("submissions", "0012_submission_ladder"),
    ]

    operations = [
        migrations.RunPython(disclose_hidden_counts, migrations.RunPython.noop),
    ]
