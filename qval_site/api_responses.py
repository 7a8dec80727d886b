"""The shapes of the API's answers, as serializers: what ``/api/v1/schema/`` and the API docs page say each call
returns (``tests/test_api_docs.py`` checks them against real answers).

They describe; they do not build the answers (:mod:`submissions.serializers`, :mod:`board.exports` and the views do).
The leaderboard row's metric fields come from the metric registry, as the row's own (:class:`board.exports.BoardRow`).
"""

from __future__ import annotations

from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from board.exports import ROW_COLUMNS, TAIL_COLUMNS
from qval import metric_registry


def _number(help_text: str) -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, help_text=help_text)


class DatasetAnswer(serializers.Serializer):
    """One dataset version (``GET /api/v1/datasets/``)."""

    key = serializers.CharField(help_text="slug@version: how every other call names it")
    slug = serializers.CharField()
    version = serializers.CharField()
    name = serializers.CharField()
    environment = serializers.CharField(help_text="environment slug")
    fingerprint = serializers.CharField(help_text="hash of the dataset's files")
    modalities = serializers.ListField(child=serializers.CharField(), help_text="text and/or image")
    splits = serializers.DictField(help_text="per split: states, candidates, tasks and labels_public")
    manifest = serializers.DictField(help_text="provenance and labelling settings (what a local run needs)")
    download = serializers.URLField(help_text="the download call of this dataset")


class BuildAnswer(serializers.Serializer):
    """One dataset build (``GET /api/v1/builds/``)."""

    id = serializers.IntegerField()
    name = serializers.CharField(help_text="builder name")
    status = serializers.ChoiceField(choices=["queued", "running", "finished", "failed"])
    stage = serializers.CharField()
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    percent = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    updated_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    dataset = serializers.CharField(help_text="the key of the dataset it built, once finished")
    fingerprint = serializers.CharField()
    error = serializers.CharField()
    worker = serializers.CharField()
    stage_started_at = serializers.DateTimeField(allow_null=True)
    seconds_left = serializers.IntegerField(allow_null=True, help_text="estimate of the current stage")
    time_left = serializers.CharField(help_text="the same in words")


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


def _board_row_fields() -> dict[str, serializers.Field]:
    """The fields of a leaderboard row, its metric fields from the registry (as :meth:`BoardRow.metric_fields`)."""
    fields: dict[str, serializers.Field] = {name: serializers.CharField() for name in ROW_COLUMNS}
    fields["submission_id"] = serializers.IntegerField()
    for spec in metric_registry.METRICS:
        if not spec.board:
            continue
        fields[spec.name] = _number(spec.label)
        if spec.board_p:
            fields[f"{spec.name}_p"] = _number(f"p-value of {spec.short}")
        if spec.kind == "point":
            fields[f"{spec.name}_marks"] = serializers.CharField(help_text="significance marks (* ** ***)")
        if spec.board_ci:
            fields[f"{spec.name}_ci"] = serializers.ListField(child=serializers.FloatField(), allow_null=True,
                                                              help_text=f"95% interval of {spec.short}")
        if spec.kind == "ranking":
            fields[f"{spec.name}_std"] = _number("std over states")
    for name in TAIL_COLUMNS:
        fields[name] = serializers.CharField(allow_null=name == "date")
    fields["num_points"] = serializers.IntegerField()
    return fields


BOARD_PAGE = inline_serializer("BoardPage", {
    "count": serializers.IntegerField(help_text="rows in all"),
    "next": serializers.URLField(allow_null=True), "previous": serializers.URLField(allow_null=True),
    "results": inline_serializer("BoardRow", _board_row_fields(), many=True)})
"""A page of the leaderboard (``GET /api/v1/leaderboard/``)."""


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
