"""A vs B: the paired comparison of two finished submissions on the same points.

Shared by the compare page (:func:`submissions.views.compare`) and the API.  For each
pointwise metric, :func:`qval.compare.paired_bootstrap` of ``metric(labels, A) -
metric(labels, B)`` on the points both submissions score, with the scores each point was
scored on (:func:`qval.scoring.point_scores`, matched by id).  Only correlations, their
difference and counts leave this module, never a label.  Finished submissions are
immutable, so results are cached.

A container submission is compared on the predictions its container wrote (kept on the
submission as ``predictions``), never on its image archive.  A row re-scored from the
published QVal v1.0 predictions is compared on the predictions file the import kept, against
the labels of its published environment (:func:`leaderboard.loading.truth_for`), under the
rules it was scored with (``qval-v1.0``); a row the authors only reported has no
predictions and cannot be compared.  On a hidden split of a dataset we host every
comparison is a new number computed on hidden labels, so only submissions that score every
point (coverage 1, nothing dropped) can be compared -- then ``rho_a``/``rho_b`` are the
disclosed leaderboard values, and a file cannot pick the subset of points another
submission is measured on -- every number is rounded as :func:`qval.scoring.disclose`
rounds results, and metrics it withholds (sign agreement) are left out.

Who may compare what: every comparison is a new number computed on the labels, so only
*public* rows can be compared by anyone -- rows published by the authors (reported or
re-scored) and the platform's baseline runs -- while a user's own submissions (on any split)
can be compared only by their owner, signed in; another account's submission is refused
with 403 (:class:`ComparisonError`).  Results are cached in the shared cache, keyed on the
two rows and their versions; a comparison not yet cached is computed at most once at a time
per pair (:class:`ComparisonBusy` meanwhile) and counts against its client address
(:func:`comparison_for`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.cache import cache
from django.db import transaction
from django.db.models import Q, QuerySet
from scipy import stats

from accounts import throttling
from budgets import services as budgets
from budgets.models import Release
from leaderboard.loading import truth_for
from qval import budget as qbudget
from qval import metric_registry
from qval import parsed_predictions as kept
from qval import predictions as qpred
from qval.compare import paired_bootstraps
from qval.metrics import POINT_METRICS, REFERENCE_RULES, significance_marks
from qval.schema import PUBLIC_SPLITS
from qval.scoring import MEAN_OF_SAMPLES, WITHHELD_ON_HIDDEN, Truth, disclose_p_value, disclose_value, point_scores

from .models import Submission

log = logging.getLogger(__name__)

SEED = 0
"""Seed of every A vs B bootstrap, so the same pair always gets the same interval."""
LEVEL = 0.95
METRICS = POINT_METRICS
"""The metrics compared: every pointwise metric of the registry (:func:`qval.compare.paired_bootstraps`)."""


COMPUTE_LOCK_S = 300.0
"""How long a pair's "being computed" marker may outlive a process that died computing it."""
BUSY_RETRY_S = 2.0
"""Seconds a caller is told to wait while the pair it asked for is being computed."""


class ComparisonError(ValueError):
    """Why two submissions cannot be compared: ``errors`` lists messages per parameter
    (``a``/``b``); ``a`` is submission A when parameter ``a`` itself was valid and may be
    shown.  ``status``: 403 when a submission is another account's, else 400."""

    def __init__(self, errors: dict[str, list[str]], a: Submission | None = None, status: int = 400) -> None:
        super().__init__("; ".join(m for ms in errors.values() for m in ms))
        self.errors = errors
        self.a = a
        self.status = status


class ComparisonBusy(RuntimeError):
    """The comparison is not cached and cannot be computed for this caller now (answered 429):
    ``message`` says why, ``retry_after`` in how many seconds to ask again."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


def _private(sub: Submission, user: AbstractBaseUser | AnonymousUser) -> bool:
    """Whether ``sub`` is a user's own row that ``user`` is not the owner of (published rows and
    the platform's baselines are public)."""
    return sub.source == Submission.SOURCE_USER and (not user.is_authenticated or sub.user_id != user.pk)


def _private_reason(pk: int, user: AbstractBaseUser | AnonymousUser) -> str:
    who = ("sign in as its owner to compare it" if not user.is_authenticated
           else "only its owner can compare it")
    return (f"submission {pk} is a user's own submission: {who}. Anyone may compare published rows "
            "(reported or re-scored) and the platform's baselines; a signed-in user may also compare their own")


def on_hidden_labels(sub: Submission) -> bool:
    """Whether ``sub`` is on labels we keep hidden: a hidden split of a dataset we host (a
    published dataset's labels are the authors' public data), so its comparisons are rounded as disclosed."""
    return sub.dataset.hosted and sub.split not in PUBLIC_SPLITS


def _one(name: str, raw: str | None, user: AbstractBaseUser | AnonymousUser) -> Submission | str:
    """The finished submission named by parameter ``name``, or why it cannot be used."""
    if raw is None or not raw.strip():
        return f"parameter {name} is missing: give the id of a finished submission"
    try:
        pk = int(raw)
    except ValueError:
        return f"{name} must be an integer submission id, got {raw!r}"
    sub = Submission.objects.select_related("dataset", "method", "backbone", "user").filter(pk=pk).first()
    if sub is None:
        return f"there is no submission {pk}"
    if _private(sub, user):
        raise ComparisonError({name: [_private_reason(pk, user)]}, status=403)
    if sub.state != Submission.FINISHED:
        state = f" (it is {sub.state})" if sub.user_id == getattr(user, "pk", None) else ""
        return f"submission {pk} is not finished{state}; only finished submissions can be compared"
    if sub.source == Submission.SOURCE_REPORTED:
        return (f"submission {pk} is a result reported by the authors: only its numbers are published, no "
                "per-point predictions, so it cannot be compared point by point")
    if sub.source == Submission.SOURCE_RESCORED and not sub.predictions:
        return (f"submission {pk} is re-scored from per-state ranking correlations only: the published summary "
                "holds no per-point predictions for it, so it cannot be compared point by point")
    if sub.kind == Submission.KIND_CONTAINER and not sub.predictions:
        return (f"submission {pk} ran before the site kept a container's predictions; "
                "only container submissions scored since then can be compared")
    if sub.score_withheld:
        return (f"submission {pk} did not beat its account's best on the hidden {sub.split} split: under the "
                "Ladder its own score is shown to nobody, so it cannot be compared")
    if on_hidden_labels(sub):
        partial = sub.results.filter(metric__in=METRICS).exclude(coverage=1.0, num_dropped=0).first()
        if partial is not None:
            return (f"submission {pk} does not score every point of the hidden {sub.split} split "
                    f"(coverage {partial.coverage:.3f}, {partial.num_dropped} dropped); on a hidden split "
                    "only submissions that score every point can be compared")
    return sub


def resolve_pair(
    params: Mapping[str, str], user: AbstractBaseUser | AnonymousUser
) -> tuple[Submission, Submission]:
    """Submissions A and B of query parameters ``a`` and ``b``.

    Raises :class:`ComparisonError` with status 403 as soon as either is another account's
    submission (or any user's, for an anonymous caller), before anything else about it is
    said; with status 400 when an id is missing or not an integer, a submission does not
    exist or is not finished, both are the same submission, or they differ in dataset,
    split, target or scoring rules.
    """
    found = {name: _one(name, params.get(name), user) for name in ("a", "b")}
    a, b = found["a"], found["b"]
    errors = {name: [value] for name, value in found.items() if isinstance(value, str)}
    if errors:
        raise ComparisonError(errors, a if isinstance(a, Submission) else None)
    assert isinstance(a, Submission) and isinstance(b, Submission)
    if a.pk == b.pk:
        raise ComparisonError({"b": [f"a and b are the same submission ({a.pk}); choose two different submissions"]}, a)
    differences = [
        f"{what} ({x} vs {y})"
        for what, x, y in (
            ("dataset", a.dataset.key, b.dataset.key),
            ("split", a.split, b.split),
            ("target", a.target.upper(), b.target.upper()),
            ("scoring rules", a.rules, b.rules),
        )
        if x != y
    ]
    if differences:
        raise ComparisonError(
            {"b": [f"submissions {a.pk} and {b.pk} differ in {', '.join(differences)}; "
                   "only submissions on the same dataset, split and target, scored under the same rules, can be compared"]},
            a,
        )
    return a, b


def _comparable(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Submission]:
    """The finished submissions ``user`` may compare: public rows that are not uploaded files, and ``user``'s own;
    neither reported nor re-scored without per-point predictions, nor withheld by the Ladder."""
    mine = Q(user_id=user.pk) if user.is_authenticated else Q(pk__in=[])
    return (
        Submission.objects.filter(state=Submission.FINISHED)
        .filter(~Q(source=Submission.SOURCE_USER) | mine)
        .exclude(ladder_climbed=False)
        .exclude(source=Submission.SOURCE_REPORTED)
        .exclude(source=Submission.SOURCE_RESCORED, predictions="")
        .select_related("method", "backbone", "user", "dataset")
    )


STARTS_SHOWN = 100
"""Rows the compare page offers as A when none is chosen (the newest)."""


@dataclass(frozen=True)
class Start:
    """A row the compare page offers as A: its id, dataset key and how the list names it."""

    pk: int
    dataset: str
    label: str


LABEL_FIELDS = ("method_name", "backbone_name", "modality", "finished_at", "user", "source")
"""The fields of a submission :func:`row_label` reads (its id aside)."""


def labelled(rows: QuerySet[Submission]) -> QuerySet[Submission]:
    """``rows`` reading only what :func:`row_label` shows (a list of a hundred rows to pick from costs a page a few
    milliseconds less than with every field and related row)."""
    return rows.select_related(None).select_related("user").only(*LABEL_FIELDS, "user__username")


def row_label(sub: Submission) -> str:
    """How a list of rows to compare names ``sub``: method, backbone, modality, submitter, date and id (two runs of
    one method are told apart by all but the method)."""
    backbone = f" · {sub.backbone_name}" if sub.backbone_name and sub.backbone_name.lower() != "none" else ""
    when = sub.finished_at.strftime("%Y-%m-%d %H:%M") if sub.finished_at else "—"
    return f"{sub.method_name}{backbone} · {sub.modality} · {sub.submitted_by} · {when} (#{sub.pk})"


def starting_points(user: AbstractBaseUser | AnonymousUser) -> list[Start]:
    """What the compare page offers as A before one is chosen: ``user``'s own finished submissions first, then the
    other rows it may compare, the newest :data:`STARTS_SHOWN` in all, ordered by dataset, split and target."""
    mine = Q(user_id=user.pk) if user.is_authenticated else Q(pk__in=[])
    shown = labelled(_comparable(user)).select_related("dataset").only(
        *LABEL_FIELDS, "dataset__slug", "dataset__version", "split", "target", "user__username")
    rows = list(shown.filter(mine).order_by("-finished_at")[:STARTS_SHOWN])
    rows += list(shown.exclude(mine).order_by("-finished_at")[:STARTS_SHOWN - len(rows)])
    rows.sort(key=lambda s: (s.dataset.key, s.split, s.target, s.method_name, s.backbone_name, -s.pk))
    return [Start(s.pk, s.dataset.key, f"{row_label(s)} · {s.split} · {s.target.upper()}") for s in rows]


def candidates(sub: Submission, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Submission]:
    """The other finished submissions ``user`` can compare ``sub`` with (same dataset, split,
    target and rules; public or ``user``'s own; neither reported nor re-scored without
    per-point predictions, nor withheld by the Ladder)."""
    return comparable_with(sub, user).exclude(pk=sub.pk).order_by("method_name", "backbone_name", "-finished_at")


def comparable_with(sub: Submission, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Submission]:
    """:func:`candidates` and ``sub`` itself: every finished submission of ``sub``'s dataset, split, target and
    rules that ``user`` may compare."""
    return _comparable(user).filter(dataset_id=sub.dataset_id, split=sub.split, target=sub.target, rules=sub.rules)


@dataclass(frozen=True)
class Reference:
    """A reference row a result may be compared with: its submission id, method and backbone."""

    pk: int
    method_name: str
    backbone_name: str


def slice_references(sub: Submission) -> list[Reference]:
    """Every reference row (platform baseline) of ``sub``'s dataset, split, target, rules and modality, ``sub``
    included, by method and backbone name, the newest first.  A baseline is never an uploaded file, so these are
    the same whoever asks; the result pages read them once per slice and results version."""
    rows = (comparable_with(sub, AnonymousUser()).filter(source=Submission.SOURCE_BASELINE, modality=sub.modality)
            .order_by("method_name", "backbone_name", "-pk").values_list("pk", "method_name", "backbone_name"))
    return [Reference(*r) for r in rows]


def reference_rows(sub: Submission, references: list[Reference] | None = None) -> list[Reference]:
    """The platform's reference rows of ``sub``'s slice that ``sub`` may be compared with, the newest per method
    and backbone: one click each from a result's page.  ``references`` is :func:`slice_references` of ``sub``
    when the caller has read it already."""
    newest: dict[tuple[str, str], Reference] = {}
    for r in slice_references(sub) if references is None else references:
        if r.pk != sub.pk:
            newest.setdefault((r.method_name, r.backbone_name), r)
    return list(newest.values())


def _summary(sub: Submission) -> dict[str, Any]:
    return {
        "id": sub.pk,
        "method": sub.method_name,
        "family": sub.method.get_family_display() if sub.method else None,
        "backbone": sub.backbone_name or None,
        "submitted_by": sub.submitted_by,
    }


def scored_predictions(sub: Submission, truth: Truth) -> qpred.Predictions:
    """The predictions ``sub`` was scored on (the uploaded file, the file its container wrote, or a
    re-scored row's published predictions), parsed as they were scored (infinite scores kept under
    the ``qval-v1.0`` rules). An uploaded file's check kept what it parsed (``Submission.parsed``,
    :func:`submissions.scoring.keep_parse`): that is read instead of the file, which is parsed again only
    for a file checked before, or when the kept parse cannot be read (logged)."""
    if sub.parsed:
        try:
            return kept.read(sub.parsed.path)
        except (OSError, ValueError):
            log.warning("submission %s: its kept parse %s cannot be read; parsing its file again", sub.pk,
                        sub.parsed.name, exc_info=True)
    path, name = sub.scored_predictions()
    return qpred.parse(path, name, reference_ids=truth.point_ids, allow_infinite=sub.rules == REFERENCE_RULES)


def _scores(sub: Submission, truth: Truth) -> np.ndarray:
    """The score of each evaluation point in the predictions ``sub`` was scored on."""
    preds = scored_predictions(sub, truth)
    return point_scores(truth, preds.ids, preds.scores, samples=preds.samples, codes=preds.codes(truth.index))


def _version(sub: Submission) -> str:
    """What a comparison of ``sub`` depends on: its file, the predictions it was scored on and
    when it last finished (a re-scored row changes at least one)."""
    finished = sub.finished_at.isoformat() if sub.finished_at else ""
    return f"{sub.sha256}:{sub.predictions.name or ''}:{finished}:{sub.rules}"


def _cache_key(a: Submission, b: Submission) -> str:
    version = hashlib.sha256(f"{_version(a)}|{_version(b)}".encode()).hexdigest()[:32]
    return f"qval:compare:v7:{a.pk}:{b.pk}:{version}:{settings.QVAL_BOOTSTRAP_RESAMPLES}:{SEED}"


def comparison_for(a: Submission, b: Submission, client: str) -> dict[str, Any]:
    """:func:`compare` of A and B (from :func:`resolve_pair`) for a caller at client address
    ``client``: from the cache when it is there, else computed if the address may
    (``QVAL_THROTTLE_RATES["compare_compute"]``, one computation at a time per address), the
    site computes fewer than ``QVAL_COMPARE_CONCURRENCY`` others and no one is computing the
    same pair; raises :class:`ComparisonBusy` otherwise, so web workers never queue behind
    comparisons."""
    cached = cache.get(_cache_key(a, b))
    if cached is not None:
        return cached
    with throttling.exclusive(f"qval:compare:computing-for:{client}", COMPUTE_LOCK_S) as free:
        if not free:
            raise ComparisonBusy("a comparison you asked for is still being computed; ask for one at a time",
                                 BUSY_RETRY_S)
        wait = throttling.take(client, "compare_compute")
        if wait is not None:
            rate = settings.QVAL_THROTTLE_RATES["compare_compute"]
            raise ComparisonBusy(f"too many new comparisons from your address (at most {rate}; cached ones are "
                                 f"not counted); try again in {wait:.0f} s", wait)
        with throttling.exclusive("qval:compare:computing", COMPUTE_LOCK_S, settings.QVAL_COMPARE_CONCURRENCY) as slot:
            if not slot:
                raise ComparisonBusy("the server is computing as many comparisons as it may at once; "
                                     "ask again in a moment", BUSY_RETRY_S)
            return compare(a, b)


def compare(a: Submission, b: Submission) -> dict[str, Any]:
    """The paired comparison of A and B (from :func:`resolve_pair`) as a JSON-friendly dict.

    ``metrics``: per metric ``rho_a``, ``rho_b`` (on the common points), ``difference``
    (``rho_a - rho_b``), ``ci95``, ``p_value`` and ``significance`` of the difference,
    ``num_points`` (points both score), ``num_dropped`` (points one of them leaves out or
    scores NaN), ``resamples`` drawn and ``num_undefined`` resamples, ``resampled`` (the unit
    each resample drew -- trajectories, tasks, or points where the trajectories are not known --,
    how many and in how many strata, :mod:`qval.sampling`), under the rules both were scored
    with (``rules``).  Cached in the shared cache per (a, b, their versions,
    resamples, seed); computed by one process at a time per pair: another asking meanwhile
    gets :class:`ComparisonBusy`.
    """
    key = _cache_key(a, b)
    cached = cache.get(key)
    if cached is not None:
        return cached
    with throttling.exclusive(f"{key}:computing", COMPUTE_LOCK_S) as mine:
        if not mine:
            raise ComparisonBusy("this comparison is being computed right now; ask again in a moment", BUSY_RETRY_S)
        cached = cache.get(key)  # finished between the first look and the marker
        if cached is not None:
            return cached
        result = _computed(a, b)
        cache.set(key, result, timeout=None)
        return result


def _mean_of_samples(sub: Submission) -> bool:
    """Whether ``sub``'s stored values follow the paper's codegen rule (:func:`qval.scoring.mean_of_samples`)."""
    return sub.results.filter(details__samples__aggregation=MEAN_OF_SAMPLES).exists()


def spends(a: Submission, b: Submission) -> bool:
    """Whether comparing A and B spends from their hidden split's information budget: they are on hidden labels
    of an environment that is not open book (whose labels do not follow from its inputs) and one of them is a
    user's prediction (an uploaded file, a method container: numbers an account chose)."""
    return (on_hidden_labels(a) and not a.dataset.environment.open_book
            and Submission.SOURCE_USER in (a.source, b.source))


def _computed(a: Submission, b: Submission) -> dict[str, Any]:
    """The comparison :func:`compare` caches: on a hidden split with a user's row, the budgeted one
    (:func:`_spent_comparison`), otherwise every metric's paired bootstrap."""
    if spends(a, b):
        return _spent_comparison(a, b)
    truth = truth_for(a.dataset, a.split, a.target)
    hidden = on_hidden_labels(a)
    both_signs = a.dataset.labels_have_both_signs(a.target)
    meaningful = [m for m in METRICS if metric_registry.shown(m, both_signs)]  # sign agreement: labels of both signs
    compared = [m for m in meaningful if not (hidden and m in WITHHELD_ON_HIDDEN)]  # sign agreement: never on hidden
    results = paired_bootstraps(truth.point_labels, _scores(a, truth), _scores(b, truth), metric_names=compared,
                                resamples=settings.QVAL_BOOTSTRAP_RESAMPLES, seed=SEED, level=LEVEL, rules=a.rules,
                                design=truth.design)
    return _answer(a, b, _rows(results.values(), hidden),
                   note=metric_registry.ONE_SIGN_NOTE if len(meaningful) < len(METRICS) else "")


def _spent_comparison(a: Submission, b: Submission) -> dict[str, Any]:
    """A vs B on a hidden split where one is a user's row: one number spent from the split's shared budget
    (:data:`qval.budget.COMPARE_COST`), under its row lock, in the transaction that records it.

    Only the global ρ is compared: A and B are their released (board) values, the difference follows from
    them, and the one new number is the paired bootstrap's standard error of the difference, rounded; the
    interval (difference ± z standard errors) and the p-value (normal) follow from those.  Refused
    (:class:`ComparisonError`, 409) when the budget is spent or retired."""
    with transaction.atomic():
        row = budgets.locked(a.dataset, a.split, a.target)
        ledger = row.ledger()
        try:
            ledger.spend(qbudget.COMPARE_COST)
        except qbudget.BudgetSpent:
            raise ComparisonError({"b": [
                f"comparing on the hidden {a.split} split of {a.dataset.key} (target {a.target.upper()}) is a new "
                f"number computed on its labels, and the split's information budget, shared by every account, is "
                f"{ledger.state} ({row.spent} of {row.size} numbers released): nothing more is released about it"
                "; compare on the dev split, or on the fresh split that replaces this one"]}, a, status=409) from None
        truth = truth_for(a.dataset, a.split, a.target)
        pc = paired_bootstraps(truth.point_labels, _scores(a, truth), _scores(b, truth), metric_names=[metric_registry.HEADLINE],
                               resamples=settings.QVAL_BOOTSTRAP_RESAMPLES, seed=SEED, level=LEVEL,
                               rules=a.rules, design=truth.design)[metric_registry.HEADLINE]
        owner = a.user_id if a.source == Submission.SOURCE_USER else b.user_id
        budgets.record(row, ledger, Release.COMPARE, a.pk, owner, [metric_registry.HEADLINE], other_id=b.pk)
    rho_a, rho_b = (sub.results.filter(metric=metric_registry.HEADLINE).values_list("value", flat=True).first() for sub in (a, b))
    se = disclose_value(pc.std_error)
    difference = disclose_value(rho_a - rho_b) if rho_a is not None and rho_b is not None else None
    low = high = p = None
    if difference is not None and se:
        half = float(stats.norm.isf((1 - LEVEL) / 2)) * se
        low, high = disclose_value(difference - half), disclose_value(difference + half)
        p = disclose_p_value(float(2 * stats.norm.sf(abs(difference) / se)))
    row_out = {"metric": metric_registry.HEADLINE, "rho_a": rho_a, "rho_b": rho_b, "difference": difference,
               "ci95": [low, high] if low is not None else None, "p_value": p,
               "significance": significance_marks(p), "std_error": se, "num_points": pc.num_points,
               "num_dropped": pc.num_dropped, "resamples": pc.resamples, "num_undefined": pc.num_undefined,
               "insufficient": pc.insufficient,
               "resampled": {"unit": pc.unit, "clusters": pc.clusters, "strata": pc.strata}}
    return _answer(a, b, [row_out], note=SPENT_NOTE)


SPENT_NOTE = ("On a hidden split a comparison with a user's submission releases one number computed on the hidden "
              "labels, the standard error of the difference of global ρ (the interval and p-value follow from it "
              "and the released values), and spends it from the split's information budget, shared by every "
              "account; the other metrics are not compared there.")
"""Why a budgeted comparison (:func:`_spent_comparison`) shows one metric."""


def _rows(results: Any, hidden: bool) -> list[dict[str, Any]]:
    """The JSON rows of :func:`qval.compare.paired_bootstraps`' results, rounded as disclosed when ``hidden``."""
    value = disclose_value if hidden else (lambda x: x)
    p_value = disclose_p_value if hidden else (lambda x: x)
    rows = []
    for pc in results:
        metric = pc.metric
        rows.append(
            {
                "metric": metric,
                "rho_a": value(pc.rho_a),
                "rho_b": value(pc.rho_b),
                "difference": value(pc.difference),
                "ci95": [value(pc.low), value(pc.high)] if pc.low is not None else None,
                "p_value": p_value(pc.p_value),
                "significance": pc.significance(),
                "num_points": pc.num_points,
                "num_dropped": pc.num_dropped,
                "resamples": pc.resamples,
                "num_undefined": pc.num_undefined,
                "insufficient": pc.insufficient,
                "resampled": {"unit": pc.unit, "clusters": pc.clusters, "strata": pc.strata},
            }
        )
    return rows


def _answer(a: Submission, b: Submission, rows: list[dict[str, Any]], note: str) -> dict[str, Any]:
    """The JSON answer of a comparison of A and B with metric ``rows`` and ``note``."""
    notes = [f"{side} (submission {sub.pk}) has several samples per point and is shown as the mean of its "
             "per-sample values (the paper's codegen rule); it is compared here on its mean prediction (codegen-avg's)"
             for side, sub in (("A", a), ("B", b)) if _mean_of_samples(sub)]
    return {
        "a": _summary(a),
        "b": _summary(b),
        "notes": notes,
        "dataset": a.dataset.key,
        "split": a.split,
        "target": a.target,
        "rules": a.rules,
        "level": LEVEL,
        "resamples": settings.QVAL_BOOTSTRAP_RESAMPLES,
        "seed": SEED,
        "metrics": rows,
        "note": note,
    }
