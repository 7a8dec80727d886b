"""The one JSON shape of a submission, used by the API and the polling pages (:func:`submission_payload`); the
fields the API's calls (:mod:`submissions.apis`) read; and the shapes of their answers, as serializers: what
``/api/v1/schema/`` and the API docs page say each call returns (``tests/test_site_pages.py`` checks them against
real answers).  The answer shapes describe; they do not build the answers (:func:`submission_payload` and
:mod:`submissions.comparison` do)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from jobs.queues import position
from leaderboard.models import MODALITY_CHOICES
from qval import metric_registry
from qval.schema import TARGETS

from . import lifecycle
from .ladder import outcome
from .models import Submission


def submission_payload(sub: Submission) -> dict[str, Any]:
    """State, timeline, error, problems, coverage and results of a submission (no labels), with its visibility
    (``public``) and method ``card``.

    ``ladder``: its step on its account's ladder of a hidden split (:func:`submissions.ladder.outcome`,
    ``None`` off a ladder); a submission that did not climb has no ``results``: its score is withheld.  Each result
    says whether the pages show it (``shown``, :func:`qval.metric_registry.shown`: sign agreement only where the
    dataset's labels have both signs), and ``one_sign_note`` why one is not shown, so that the CLI shows what the
    pages show.
    """
    results = list(sub.results.all()) if sub.state == Submission.FINISHED and not sub.score_withheld else []
    asks = any(not metric_registry.shown(r.metric, both_signs=False) for r in results)  # sign agreement is there
    both_signs = not asks or sub.dataset.labels_have_both_signs(sub.target)
    shown = {r.metric: metric_registry.shown(r.metric, both_signs) for r in results}
    return {
        "id": sub.pk,
        "kind": sub.kind,
        "source": sub.source,
        "dataset": sub.dataset.key,
        "split": sub.split,
        "target": sub.target,
        "method": sub.method_name,
        "family": sub.method.family if sub.method else None,
        "backbone": sub.backbone_name or None,
        "modality": sub.modality,
        "public": sub.public,
        "card": {"description": sub.description, "paper_url": sub.paper_url or None, "code_url": sub.code_url or None,
                 "open_weights": sub.open_weights},
        "filename": sub.filename,
        "format": sub.file_format,
        "sha256": sub.sha256,
        "size_bytes": sub.size_bytes,
        "state": sub.state,
        "final": sub.is_final,
        "error": sub.error or None,
        "fault": sub.fault or None,
        "problems": sub.problems,
        "coverage": sub.coverage,
        "worker": sub.worker or None,
        "attempt": sub.attempt,
        "queue_position": queue_position(sub),
        "timeline": {state: ts.isoformat() for state, ts in sub.timeline()},  # each state's latest time
        "history": [{**t, "at": t["at"].isoformat()} for t in sub.transitions()],  # type: ignore[attr-defined]
        "container": container_payload(sub),
        "baseline": baseline_payload(sub),
        "ladder": outcome(sub),
        "results": [
            {
                "metric": r.metric,
                "value": r.value,
                "p_value": r.p_value,
                "num_points": r.num_points,
                "num_dropped": r.num_dropped,
                "coverage": r.coverage,
                "insufficient": r.insufficient,
                "details": r.details,
                "shown": shown[r.metric],
            }
            for r in results
        ],
        "one_sign_note": "" if all(shown.values()) else metric_registry.ONE_SIGN_NOTE,
    }


def queue_position(sub: Submission) -> dict[str, object] | None:
    """Where a queued submission stands in its queue (:func:`jobs.queues.position`: its queue, the jobs a worker
    takes before it, the jobs running there); ``None`` unless it is queued."""
    place = position(lifecycle.JOB, sub)
    return place.as_dict() if place is not None else None


def container_payload(sub: Submission) -> dict[str, Any] | None:
    """How a container submission ran (``None`` for a predictions file): image ID, limits,
    deadline, outcome (``finished`` or the runner's reason; empty until it ran), exit code,
    seconds run, backbone tokens used (``None`` without a backbone) and the first and last 64 KiB of stdout and stderr."""
    if sub.kind != Submission.KIND_CONTAINER:
        return None
    return {
        "image_id": sub.image_id or None,
        "limits": sub.limits,
        "deadline": sub.deadline.isoformat() if sub.deadline else None,
        "outcome": sub.container_outcome or None,
        "exit_code": sub.exit_code,
        "wall_s": sub.wall_s,
        "backbone_tokens": sub.token_usage or None,
        "stdout": sub.stdout,
        "stderr": sub.stderr,
    }


def baseline_payload(sub: Submission) -> dict[str, Any] | None:
    """A baseline run's config (method and version, prompt hash, backbone and checkpoint hash,
    sampling parameters, seed, counts), progress (points done / total, tokens, ETA in seconds) and
    NaN count; ``None`` for other submissions."""
    if sub.kind != Submission.KIND_BASELINE:
        return None
    p, shown = sub.progress or {}, sub.job_progress
    assert shown is not None
    return {
        "config": sub.config,
        "progress": {"done": p.get("done", 0), "total": p.get("total"), "tokens": p.get("tokens", 0),
                     "eta_s": shown.seconds_left, "updated_at": p.get("updated_at"),
                     "deliveries": p.get("deliveries", 0), "shown": shown.as_dict()},
        "num_nan": sub.num_nan,
    }


# -- what an upload and a card change send --------------------------------------------------


class UploadCard(serializers.Serializer):
    """What every upload says besides its file and what it is evaluated on: the method's name, backbone and modality,
    whether the row is public, and the method card. An upload's serializer lists its own fields first (its first base
    class), then these."""

    method_name = serializers.CharField(max_length=100)
    backbone = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    modality = serializers.ChoiceField(choices=[m for m, _ in MODALITY_CHOICES], required=False, default="text")
    public = serializers.BooleanField(required=False, allow_null=True, default=None,
                                      help_text="false: the row is its owner's only (no board, figure or permalink); "
                                                "by default true on the test split, false on dev (a self-check)")
    description = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card")
    paper_url = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card, http(s)")
    code_url = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card, http(s)")
    open_weights = serializers.BooleanField(required=False, allow_null=True, default=None, help_text="method card")


class _PredictionsFile(serializers.Serializer):
    """A predictions upload's own fields: the file and the one dataset, split and target it is scored on."""

    file = serializers.FileField(allow_empty_file=True)
    dataset = serializers.CharField(help_text="slug or slug@version")
    split = serializers.ChoiceField(choices=["train", "dev", "test"])
    target = serializers.ChoiceField(choices=list(TARGETS))


class SubmissionUpload(_PredictionsFile, UploadCard):
    """Fields of a predictions upload."""


class _ContainerImage(serializers.Serializer):
    """A method-container upload's own fields: the image and the datasets and splits it is run on."""

    kind = serializers.ChoiceField(choices=["container"])
    file = serializers.FileField(help_text="docker save / podman save archive, tar or tar.gz")
    dataset = serializers.ListField(
        child=serializers.CharField(), help_text="slug or slug@version; repeat the field or separate with commas")
    split = serializers.ListField(
        child=serializers.CharField(), help_text="dev and/or test; repeat the field or separate with commas")
    target = serializers.ChoiceField(choices=list(TARGETS), help_text="q (pointwise and per-state ranking) or v")


class ContainerUpload(_ContainerImage, UploadCard):
    """Fields of a method-container upload (``kind=container``)."""


class CardChange(serializers.Serializer):
    """The method-card fields a PATCH changes (those it leaves out stay)."""

    public = serializers.BooleanField(required=False, help_text="false: the row is its owner's only")
    description = serializers.CharField(required=False, allow_blank=True, help_text="method card")
    paper_url = serializers.CharField(required=False, allow_blank=True, help_text="method card, http(s)")
    code_url = serializers.CharField(required=False, allow_blank=True, help_text="method card, http(s)")
    open_weights = serializers.BooleanField(required=False, allow_null=True, help_text="method card")


# -- the shapes of the answers ---------------------------------------------------------------


def _number(help_text: str) -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, help_text=help_text)


class ResultAnswer(serializers.Serializer):
    """One metric of a submission."""

    metric = serializers.CharField(help_text="a metric of the registry (How we score)")
    value = _number("null: undefined (constant scores) or too few points")
    p_value = _number("null where the metric has none")
    num_points = serializers.IntegerField()
    num_dropped = serializers.IntegerField(help_text="points without a finite score")
    coverage = serializers.FloatField()
    insufficient = serializers.BooleanField(help_text="fewer usable points than the metric needs")
    details = serializers.DictField(help_text="ci95, per-state std, ...; on a hidden split only what is disclosed")
    shown = serializers.BooleanField(help_text="whether the site's pages show it for this dataset (sign agreement "
                                               "only where labels have both signs): the CLI shows the same")


class CardAnswer(serializers.Serializer):
    """A submission's method card."""

    description = serializers.CharField()
    paper_url = serializers.URLField(allow_null=True)
    code_url = serializers.URLField(allow_null=True)
    open_weights = serializers.BooleanField(allow_null=True)


class SubmissionAnswer(serializers.Serializer):
    """A submission (``GET``, ``POST`` and ``PATCH /api/v1/submissions/``)."""

    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=["file", "container", "baseline"])
    source = serializers.ChoiceField(choices=["user", "baseline", "rescored", "reported"])
    dataset = serializers.CharField()
    split = serializers.CharField()
    target = serializers.CharField()
    method = serializers.CharField()
    family = serializers.CharField(allow_null=True)
    backbone = serializers.CharField(allow_null=True)
    modality = serializers.CharField()
    public = serializers.BooleanField(help_text="on the boards with a permalink; false: its owner's only")
    card = CardAnswer()
    filename = serializers.CharField()
    format = serializers.CharField()
    sha256 = serializers.CharField()
    size_bytes = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["received", "validating", "queued", "scoring", "finished", "failed"])
    final = serializers.BooleanField(help_text="finished or failed: it will not change")
    error = serializers.CharField(allow_null=True, help_text="why it failed")
    fault = serializers.CharField(allow_null=True, help_text="user (the file) or system (the platform)")
    problems = serializers.ListField(child=serializers.DictField(), help_text="each problem of a refused file: "
                                                                              "code, message, row, field")
    coverage = serializers.DictField(help_text="evaluation points expected, provided and missing")
    worker = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField()
    queue_position = serializers.DictField(
        allow_null=True, help_text="while queued: its queue, how many jobs a worker takes before it (ahead; users' "
                                   "jobs go before the platform's runs) and how many run there now (running)")
    timeline = serializers.DictField(help_text="each state's latest time")
    history = serializers.ListField(child=serializers.DictField(), help_text="every transition: state, at, attempt")
    container = serializers.DictField(allow_null=True, help_text="a method container's run: image, limits, outcome")
    baseline = serializers.DictField(allow_null=True, help_text="a baseline run's config and progress")
    ladder = serializers.DictField(allow_null=True, help_text="its step on its account's ladder of a hidden split")
    results = ResultAnswer(many=True, help_text="empty until finished, and where the Ladder withholds the score")
    one_sign_note = serializers.CharField(help_text="why a metric is not shown, when one is not")


class ContainerSubmissionsAnswer(serializers.Serializer):
    """The submissions one method-container upload made (one per dataset and split named)."""

    submissions = SubmissionAnswer(many=True)


class CompareSideAnswer(serializers.Serializer):
    """Submission A or B of a comparison."""

    id = serializers.IntegerField()
    method = serializers.CharField()
    family = serializers.CharField(allow_null=True)
    backbone = serializers.CharField(allow_null=True)
    submitted_by = serializers.CharField()


class CompareMetricAnswer(serializers.Serializer):
    """One metric of a comparison: A, B, their difference and its paired-bootstrap interval."""

    metric = serializers.CharField()
    rho_a = _number("A on the common points")
    rho_b = _number("B on the common points")
    difference = _number("A − B")
    ci95 = serializers.ListField(child=serializers.FloatField(), allow_null=True, help_text="95% CI of A − B")
    p_value = _number("two-sided bootstrap test of no difference")
    significance = serializers.CharField(help_text="marks of the p-value (* ** ***)")
    num_points = serializers.IntegerField(help_text="common points")
    num_dropped = serializers.IntegerField(help_text="points A or B does not score")
    resamples = serializers.IntegerField()
    num_undefined = serializers.IntegerField(help_text="resamples where a value is undefined")
    insufficient = serializers.BooleanField(help_text="too few common points")
    resampled = serializers.DictField(help_text="what the bootstrap resampled: unit, clusters, strata")


class CompareAnswer(serializers.Serializer):
    """A vs B (``GET /api/v1/compare/``)."""

    a = CompareSideAnswer()
    b = CompareSideAnswer()
    notes = serializers.ListField(child=serializers.CharField())
    dataset = serializers.CharField()
    split = serializers.CharField()
    target = serializers.CharField()
    rules = serializers.CharField(help_text="scoring rules: qval or qval-v1.0")
    level = serializers.FloatField(help_text="confidence level of the intervals")
    resamples = serializers.IntegerField()
    seed = serializers.IntegerField()
    metrics = CompareMetricAnswer(many=True)
    note = serializers.CharField(allow_null=True, help_text="why a metric is left out, when one is")
