"""Score a set of predictions against a dataset split's labels.

This is the one place that turns (labels, predictions) into the rows a leaderboard shows;
the Celery worker, the ``qval evaluate`` CLI and the tests all call :func:`score`.

Rules (documented on the site's "how we score" page):

* **Points.** Target ``q``: one point per state, the actor's candidate; target ``v``: one
  point per state. Predictions are matched to points by id, not by position.
* **Coverage.** Ids of the split that the file does not mention are allowed; they lower
  ``coverage`` (provided / expected) and are not counted as dropped.
* **NaN.** A provided score that is NaN (null, empty, ``nan``) is dropped and counted in
  ``num_dropped``.
* **Minimum.** With fewer than :data:`qval.metrics.MIN_USABLE_POINTS` usable pairs a
  correlation is reported as insufficient (no value).
* **Ranking.** When the predictions score candidates other than the actor's (target ``q``),
  the per-state ranking Spearman and the selection metrics are computed over the states
  whose candidates were scored; their ``coverage`` is candidates scored / candidates of the
  split and ``details["num_states"]`` the states scored.
* **Samples.** A file with a ``sample`` column (several predictions per id) is scored on
  each id's mean prediction over the samples, with every sample's own value and their
  aggregate in the row's details (:func:`score_samples`).
* **Disclosure.** What a user may see of the rows of a hidden split is decided by
  :func:`disclose`: aggregates of the whole submission only, rounded; ranking and selection
  only for a file that scores every candidate; no count that depends on the labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Hashable, Sequence

import numpy as np
import pandas as pd

from qval import metric_registry, metrics, sampling, schema
from qval.predictions import SplitIndex

DISCLOSED_DIGITS = 3
"""Decimals of every number disclosed about a hidden split: what the leaderboard shows."""
DISCLOSED_P_DIGITS = 2
"""Significant digits of a p-value disclosed about a hidden split (enough for the stars)."""
PUBLIC_DIGITS = 4
"""Decimals a page prints of a number computed on public labels (train, dev), which is stored unrounded."""
DISCLOSED_DETAILS = frozenset({"ci95", "ci95_resampled", "significance", "samples", "num_states", "withheld"})
"""The ``details`` keys that may be disclosed about a hidden split (:func:`disclose`): ``ci95``, what its
resamples drew (``ci95_resampled``: the unit and how many there are, counts of the split's trajectories or
tasks, not of its labels) and ``significance`` of a global correlation, ``samples`` only as ``{"aggregation", "num_samples"}``,
``num_states`` (the states a ranking file scores: the file's count, not the labels') and
``withheld`` (why a row shows no value)."""
WITHHELD_ON_HIDDEN: frozenset[str] = frozenset({"sign_agreement"})
"""Metrics never disclosed on a hidden split.  Sign agreement is a count of label signs divided by
the number of points, exact at any rounding fine enough to be useful below 1,000 points: a file of
constant scores reads how many labels are positive, zero or negative."""
WITHHELD_COUNT = ("not disclosed on a hidden split: sign agreement is a count of label signs "
                  "(agreeing points / points), which any useful rounding shows exactly")
"""Why :data:`WITHHELD_ON_HIDDEN` rows show no value (``details["withheld"]``)."""
WITHHELD_PARTIAL = ("not disclosed on a hidden split: the state-local ranking and selection metrics are "
                    "shown only for a file that scores every candidate of every state (coverage 1, nothing "
                    "dropped); a file scoring a few states would read their values")
"""Why a ranking or selection row of an incomplete file shows no value on a hidden split."""


@dataclass(frozen=True)
class Truth:
    """The labels a submission is scored against.

    ``point_ids``/``point_labels``: the pointwise evaluation points in dataset order.
    ``group_ids``/``group_labels``: for target ``q``, every state's candidate ids and Q labels
    (empty for target ``v``).  ``trajectories``/``tasks``: where known, the trajectory and the task of
    each point's state (one point per state, so they are the groups' too: the states in the same order),
    which every interval and paired comparison resamples (:attr:`design`, :mod:`qval.sampling`);
    ``None`` where they are not known (a published summary file records none), and then points are
    resampled and the intervals say so.
    """

    point_ids: Sequence[str]
    point_labels: np.ndarray
    group_ids: Sequence[Sequence[str]] = ()
    group_labels: Sequence[np.ndarray] = ()
    trajectories: Sequence[Hashable] | None = None
    tasks: Sequence[Hashable] | None = None

    def __post_init__(self) -> None:
        if self.trajectories is None:
            if self.tasks is not None:
                raise ValueError("a truth's tasks need its trajectories")
            return
        n = len(self.point_ids)
        if len(self.trajectories) != n or (self.tasks is not None and len(self.tasks) != n):
            raise ValueError(f"a truth needs one trajectory and task per point ({n} points)")
        if self.group_ids and len(self.group_ids) != n:
            raise ValueError(f"a truth with trajectories has one point per state: {n} points, "
                             f"{len(self.group_ids)} states")

    @cached_property
    def design(self) -> sampling.Design | None:
        """The :class:`qval.sampling.Design` of the points (and of the states, in the same order), or
        ``None`` when their trajectories are not known."""
        if self.trajectories is None:
            return None
        return sampling.Design.of(self.trajectories, self.tasks)

    def design_of(self, keep: np.ndarray) -> sampling.Design | None:
        """:attr:`design` of the points (states) ``keep`` selects (a boolean mask over them)."""
        return None if self.design is None else self.design.subset(keep)

    @cached_property
    def index(self) -> SplitIndex:
        """Every id a prediction may name, the points first (built once, on first use)."""
        return SplitIndex(self.point_ids, (cid for group in self.group_ids for cid in group))

    @cached_property
    def _group_codes(self) -> np.ndarray:
        """The codes of every group's candidates, groups one after another."""
        return self.index.encode([cid for group in self.group_ids for cid in group])


@dataclass(frozen=True)
class MetricRow:
    """One reported metric."""

    metric: str
    value: float | None
    p_value: float | None
    num_points: int
    num_dropped: int
    coverage: float
    insufficient: bool = False
    details: dict[str, Any] = field(default_factory=dict)


def _scatter(codes: np.ndarray, scores: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores by code (NaN where none is given) and a mask of the codes given; unknown codes (< 0) are ignored."""
    known = codes >= 0
    by_code = np.full(size, np.nan)
    given = np.zeros(size, dtype=bool)
    by_code[codes[known]] = scores[known]
    given[codes[known]] = True
    return by_code, given


def score(
    truth: Truth,
    ids: np.ndarray,
    scores: np.ndarray,
    *,
    samples: np.ndarray | None = None,
    codes: np.ndarray | None = None,
    bootstrap_resamples: int = 1000,
    seed: int = 0,
    rules: str = metrics.QVAL_RULES,
) -> list[MetricRow]:
    """Compute every metric of one submission (ids/scores/samples from :mod:`qval.predictions`).

    Without ``samples`` (a file without a ``sample`` column) each id appears once.  With
    ``samples`` (each row's sample number) the submission is scored by
    :func:`score_samples`.  ``codes``, when given, are the ids' codes in ``truth.index``
    (:meth:`qval.predictions.Predictions.codes`), so ids already matched by
    :func:`qval.predictions.validate` are not matched again.  ``rules``: one of
    :data:`qval.metrics.RULES` (``qval-v1.0`` reproduces the reference code).
    """
    metrics.check_rules(rules)
    if samples is not None:
        return score_samples(
            truth, ids, scores, samples, codes=codes, bootstrap_resamples=bootstrap_resamples, seed=seed,
            rules=rules,
        )
    if codes is None:
        codes = truth.index.encode(ids)
    by_code, given = _scatter(codes, np.asarray(scores, dtype=np.float64), len(truth.index))
    rows = _point_rows(truth, by_code, given, bootstrap_resamples=bootstrap_resamples, seed=seed, rules=rules)
    rows.extend(_ranking_rows(truth, by_code, given, bootstrap_resamples=bootstrap_resamples, seed=seed, rules=rules))
    return rows


def _point_rows(
    truth: Truth, by_code: np.ndarray, given: np.ndarray, *, bootstrap_resamples: int, seed: int, rules: str
) -> list[MetricRow]:
    """The pointwise metric rows of the scores by code of ``truth.index`` (see :func:`_scatter`)."""
    expected = truth.index.num_expected
    point_scores, provided = by_code[:expected], given[:expected]
    coverage = float(provided.sum()) / expected if expected else 0.0
    dropped = int((provided & np.isnan(point_scores)).sum())
    labels = np.asarray(truth.point_labels, dtype=np.float64)[provided]
    used_scores = point_scores[provided]
    design = truth.design_of(provided)

    rows: list[MetricRow] = []
    for name, corr in metrics.point_metrics(labels, used_scores, rules=rules).items():
        details: dict[str, Any] = {"significance": corr.significance()}
        if corr.value is not None and bootstrap_resamples and metric_registry.get(name).resampler is not None:
            ci = metrics.bootstrap_point_ci(
                labels, used_scores, name, resamples=bootstrap_resamples, seed=seed, rules=rules, design=design
            )
            details["ci95"] = [ci.low, ci.high]
            details["ci95_resampled"] = ci.resampled()
        rows.append(
            MetricRow(
                metric=name,
                value=corr.value,
                p_value=corr.p_value,
                num_points=corr.num_points,
                num_dropped=dropped,
                coverage=coverage,
                insufficient=corr.insufficient,
                details=details,
            )
        )
    return rows


@dataclass(frozen=True)
class SampleTable:
    """Predictions with a ``sample`` column as an ids x samples table.

    ``ids``: each distinct id once, in order of first appearance; ``sample_numbers``: the
    distinct sample numbers, ascending; ``table[i, s]``: the score sample ``s`` gives id
    ``i`` (NaN when it gives none or gives NaN); ``given[i, s]``: whether sample ``s`` has a
    row for id ``i``.
    """

    ids: np.ndarray
    sample_numbers: np.ndarray
    table: np.ndarray
    given: np.ndarray

    def in_every_sample(self) -> np.ndarray:
        """Mask of the ids every sample has a row for (what counts as *provided*)."""
        return self.given.all(axis=1)

    def mean_scores(self) -> np.ndarray:
        """Per id, the mean of its non-NaN scores over the samples (NaN if it has none), summed in the reference's
        order: ``numpy.nanmean`` of the samples x ids array along the samples, which adds sample after sample
        (a sum along the ids x samples rows pairs them otherwise, and its last bit can differ, which moves ties)."""
        by_sample = np.ascontiguousarray(self.table.T)
        finite = ~np.isnan(by_sample)
        count = finite.sum(axis=0)
        total = np.where(finite, by_sample, 0.0).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def sample_table(ids: np.ndarray, scores: np.ndarray, samples: np.ndarray) -> SampleTable:
    """Arrange rows ``(ids[r], samples[r], scores[r])`` into a :class:`SampleTable`.

    Raises ``ValueError`` when the three differ in length or an (id, sample) pair repeats
    (which :func:`qval.predictions.validate` reports to the user before scoring).
    """
    ids = np.asarray(ids, dtype=object)
    scores = np.asarray(scores, dtype=np.float64)
    samples = np.asarray(samples)
    if not len(ids) == len(scores) == len(samples):
        raise ValueError(f"ids, scores and samples differ in length: {len(ids)}, {len(scores)}, {len(samples)}")
    id_codes, unique_ids = pd.factorize(pd.Index(ids), sort=False)
    sample_numbers, sample_codes = np.unique(samples, return_inverse=True)
    table = np.full((len(unique_ids), len(sample_numbers)), np.nan)
    given = np.zeros(table.shape, dtype=bool)
    given[id_codes, sample_codes] = True
    if int(given.sum()) != len(ids):
        raise ValueError("an (id, sample) pair appears more than once")
    table[id_codes, sample_codes] = scores
    return SampleTable(np.asarray(unique_ids, dtype=object), sample_numbers, table, given)


def score_samples(
    truth: Truth,
    ids: np.ndarray,
    scores: np.ndarray,
    samples: np.ndarray,
    *,
    codes: np.ndarray | None = None,
    bootstrap_resamples: int = 1000,
    seed: int = 0,
    rules: str = metrics.QVAL_RULES,
) -> list[MetricRow]:
    """Score a submission with several samples per id (a file with a ``sample`` column).

    Rules (the reference's rule 6 for the per-sample aggregate):

    * **Main value.** Each pointwise metric row is computed, exactly as :func:`score` does
      for one sample, on the per-id **mean prediction**: the mean of the id's non-NaN
      scores over the samples.  An id counts as provided when every sample has a row for
      it (as in :func:`qval.predictions.validate`); a provided id whose scores are all NaN
      is dropped.  The ranking and selection rows also use the mean prediction.
    * **Per sample.** Each sample is also scored on its own (its rows only, NaN dropped)
      and ``details["samples"]`` of every pointwise row holds ``values`` (one per sample,
      ``None`` where undefined or insufficient), ``sample_numbers`` and ``aggregate``: the
      :func:`qval.metrics.aggregate` of those values (mean, sample std ``ddof=1``, min,
      max, median over the samples whose value is not ``None``; ``num_samples`` counts
      those, ``num_nan`` the others).

    ``codes``: as in :func:`score`.
    """
    size = len(truth.index)
    if codes is None:
        codes = truth.index.encode(ids)
    table, codes, mean_by_code, mean_given = _mean_prediction(truth, scores, samples, codes)
    rows = _point_rows(
        truth, mean_by_code, mean_given, bootstrap_resamples=bootstrap_resamples, seed=seed, rules=rules
    )

    expected = truth.index.num_expected
    labels = np.asarray(truth.point_labels, dtype=np.float64)
    per_sample: dict[str, list[float | None]] = {row.metric: [] for row in rows}
    for s in range(table.sample_numbers.size):
        given = table.given[:, s]
        by_code, provided = _scatter(codes[given], table.table[given, s], size)
        provided = provided[:expected]
        for name, corr in metrics.point_metrics(labels[provided], by_code[:expected][provided], rules=rules).items():
            per_sample[name].append(corr.value)
    numbers = [int(n) for n in table.sample_numbers.tolist()]
    for row in rows:
        agg = metrics.aggregate(per_sample[row.metric], rules)
        row.details["samples"] = {
            "aggregation": MEAN_PREDICTION,
            "num_samples": len(numbers),
            "sample_numbers": numbers,
            "values": per_sample[row.metric],
            "aggregate": {
                "mean": agg.mean,
                "std": agg.std,
                "min": agg.min,
                "max": agg.max,
                "median": agg.median,
                "num_samples": agg.num_samples,
                "num_nan": agg.num_nan,
            },
        }
    rows.extend(_ranking_rows(
        truth, mean_by_code, mean_given, bootstrap_resamples=bootstrap_resamples, seed=seed, rules=rules
    ))
    return rows


MEAN_OF_SAMPLES = "mean_of_samples"
"""The paper's ``codegen`` rule for a sampled predictor: a metric's value is the mean of its per-sample values."""
MEAN_PREDICTION = "mean_prediction"
"""The ``codegen-avg`` rule: a metric's value is computed on the per-id mean prediction (:func:`score_samples`)."""


def mean_of_samples(rows: Sequence[MetricRow]) -> list[MetricRow]:
    """``rows`` of :func:`score_samples` under the paper's ``codegen`` rule: each pointwise row that holds per-sample
    values takes their mean (the reference's ``aggregate_correlations.<metric>.mean``) as its value, their sample
    std as ``details["std"]``, no p-value and no interval; what the mean prediction gave moves to
    ``details["mean_prediction"]`` (``value``, ``p_value``, ``ci95``).  Other rows are returned as they are."""
    out = []
    for row in rows:
        samples = row.details.get("samples")
        if not samples or "aggregate" not in samples:
            out.append(row)
            continue
        details = {k: v for k, v in row.details.items() if k != "ci95"}
        details["mean_prediction"] = {"value": row.value, "p_value": row.p_value, "ci95": row.details.get("ci95")}
        details["samples"] = {**samples, "aggregation": MEAN_OF_SAMPLES}
        agg = samples["aggregate"]
        details["std"] = agg["std"]
        out.append(MetricRow(metric=row.metric, value=agg["mean"], p_value=None, num_points=row.num_points,
                             num_dropped=row.num_dropped, coverage=row.coverage, insufficient=agg["mean"] is None,
                             details=details))
    return out

def _mean_prediction(
    truth: Truth, scores: np.ndarray, samples: np.ndarray, codes: np.ndarray
) -> tuple[SampleTable, np.ndarray, np.ndarray, np.ndarray]:
    """The sample table of the rows whose id the split has, its ids' codes, and the mean
    prediction by code with its mask (see :func:`_scatter`): an id counts as given when
    every sample has a row for it."""
    known = codes >= 0  # ids the split does not have are ignored (validation reports them)
    table = sample_table(codes[known], np.asarray(scores)[known], np.asarray(samples)[known])
    table_codes = table.ids.astype(np.int64)
    full = table.in_every_sample()
    by_code, given = _scatter(table_codes[full], table.mean_scores()[full], len(truth.index))
    return table, table_codes, by_code, given


def point_scores(
    truth: Truth,
    ids: np.ndarray,
    scores: np.ndarray,
    *,
    samples: np.ndarray | None = None,
    codes: np.ndarray | None = None,
) -> np.ndarray:
    """The score each pointwise evaluation point is scored on, in ``truth.point_ids`` order.

    Exactly the scores :func:`score` correlates with ``truth.point_labels``: matched by
    id; NaN where the file gives the point no score or a NaN score; with ``samples``, the
    per-id mean prediction of :func:`score_samples`.  ``codes``: as in :func:`score`.
    Used to compare two submissions on the same points (:func:`qval.compare.paired_bootstrap`).
    """
    return _scored_by_code(truth, ids, scores, samples, codes)[0][: truth.index.num_expected]


def state_ranking_values(
    truth: Truth,
    ids: np.ndarray,
    scores: np.ndarray,
    *,
    samples: np.ndarray | None = None,
    codes: np.ndarray | None = None,
    rules: str = metrics.QVAL_RULES,
) -> np.ndarray:
    """Each state's ranking Spearman, in ``truth.group_ids`` order: the per-state values whose
    mean :func:`score` reports as ``ranking_spearman`` (:func:`qval.metrics.state_ranking_spearman`
    of the state's candidates, with the same mean prediction and matching by id).

    NaN for a state the file scores no candidate of, a skipped state, and every state of a file
    that scores no candidate but the actors' (which gets no ranking row); empty for target
    ``v``.  ``codes``, ``rules``: as in :func:`score`.  Used to compare two submissions state by
    state (:mod:`qval.ladder`).
    """
    values = np.full(len(truth.group_ids), np.nan)
    by_code, given = _scored_by_code(truth, ids, scores, samples, codes)
    if not truth.group_ids or not given[truth.index.num_expected :].any():
        return values
    flat_scores, provided = by_code[truth._group_codes], given[truth._group_codes]
    start = 0
    for k, group_labels in enumerate(truth.group_labels):
        end = start + len(group_labels)
        if provided[start:end].any():
            value = metrics.state_ranking_spearman(group_labels, flat_scores[start:end], rules)
            values[k] = np.nan if value is None else value
        start = end
    return values


def _scored_by_code(
    truth: Truth, ids: np.ndarray, scores: np.ndarray, samples: np.ndarray | None, codes: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The scores :func:`score` scores, by code of ``truth.index`` (NaN where none), and the mask of
    the codes given (see :func:`_scatter`): with ``samples``, each id's mean prediction."""
    if codes is None:
        codes = truth.index.encode(ids)
    if samples is None:
        return _scatter(codes, np.asarray(scores, dtype=np.float64), len(truth.index))
    _, _, by_code, given = _mean_prediction(truth, scores, samples, codes)
    return by_code, given


def _ranking_rows(
    truth: Truth, by_code: np.ndarray, given: np.ndarray, *, bootstrap_resamples: int, seed: int, rules: str
) -> list[MetricRow]:
    """The ranking and selection rows (target ``q``), when candidates other than the actor's were scored."""
    if not truth.group_ids:
        return []
    if not given[truth.index.num_expected :].any():
        return []  # a pointwise file: no candidate other than the actor's was scored
    flat_scores = by_code[truth._group_codes]
    provided = given[truth._group_codes]
    groups = []
    scored = np.zeros(len(truth.group_ids), dtype=bool)
    start = 0
    for k, (group, group_labels) in enumerate(zip(truth.group_ids, truth.group_labels)):
        end = start + len(group)
        group_scores = flat_scores[start:end]
        start = end
        if provided[start - len(group) : end].any():
            scored[k] = True
            groups.append((np.asarray(group_labels, dtype=np.float64), group_scores))
    scored_states = int(scored.sum())
    coverage = float(provided.sum()) / provided.size  # candidates scored / candidates of the split
    dropped = int((provided & np.isnan(flat_scores)).sum())
    rows = []
    for name in metric_registry.RANKING:
        spec = metric_registry.get(name)
        summary: metrics.RankingSummary = spec.compute(groups, rules)
        details: dict[str, Any] = {
            "std": summary.std,
            "num_valid": summary.num_valid,
            "num_skipped": summary.num_skipped,
            "num_states": scored_states,
        }
        if summary.mean is not None and bootstrap_resamples and spec.resampler is not None:
            ci = spec.resample(summary.per_state, resamples=bootstrap_resamples, seed=seed,
                               design=truth.design_of(scored))
            details["ci95"] = [ci.low, ci.high]
            details["ci95_resampled"] = ci.resampled()
        rows.append(MetricRow(metric=name, value=summary.mean, p_value=None, num_points=summary.num_valid,
                              num_dropped=dropped, coverage=coverage, insufficient=summary.mean is None,
                              details=details))
    selection = metrics.selection_metrics(groups, rules)
    for name in metric_registry.SELECTION:
        value, num_points = metric_registry.get(name).compute(selection)
        rows.append(MetricRow(metric=name, value=value, p_value=None, num_points=num_points, num_dropped=dropped,
                              coverage=coverage, insufficient=value is None, details={"num_states": scored_states}))
    return rows


def truth_from_dataset(ds: "schema.Dataset", split: str, target: str) -> Truth:
    """The labels of a split of an on-disk dataset (public splits for researchers)."""
    states = ds.states_in(split)
    if not states:
        raise schema.SchemaError(f"dataset {ds.manifest.key} has no split {split!r}")
    point_ids = ds.point_ids(split, target)
    labels = ds.labels_for(target)
    point_labels = np.array([labels[i] for i in point_ids], dtype=np.float64)
    design = {"trajectories": [s.trajectory for s in states], "tasks": [s.task for s in states]}
    if target == "v":
        return Truth(point_ids=point_ids, point_labels=point_labels, **design)
    group_ids = [[c.id for c in s.candidates] for s in states]
    group_labels = [np.array([ds.q_labels[c] for c in g], dtype=np.float64) for g in group_ids]
    return Truth(point_ids=point_ids, point_labels=point_labels, group_ids=group_ids, group_labels=group_labels,
                 **design)


def truth_from_frame(frame: pd.DataFrame, target: str) -> Truth:
    """The labels of a downloaded public split (one row per candidate, with ``q_label``/``v_label``), with
    the states' trajectories and tasks where the file has those columns."""
    def design(states: pd.DataFrame) -> dict[str, Any]:
        if not {"trajectory", "task"} <= set(states.columns):
            return {}
        return {"trajectories": states["trajectory"].tolist(), "tasks": states["task"].tolist()}

    if target == "v":
        states = frame.drop_duplicates("state_id")
        return Truth(point_ids=list(states["state_id"]), point_labels=states["v_label"].to_numpy(np.float64),
                     **design(states))
    actors = frame[frame["is_actor"].astype(bool)]
    group_ids: list[list[str]] = []
    group_labels: list[np.ndarray] = []
    for _, rows in frame.groupby("state_id", sort=False):
        group_ids.append(list(rows["candidate_id"]))
        group_labels.append(rows["q_label"].to_numpy(np.float64))
    return Truth(
        point_ids=list(actors["candidate_id"]),
        point_labels=actors["q_label"].to_numpy(np.float64),
        group_ids=group_ids,
        group_labels=group_labels,
        **design(actors),
    )


def disclose_value(value: float | None, digits: int = DISCLOSED_DIGITS) -> float | None:
    """A number computed on a hidden split, rounded as disclosed (:data:`DISCLOSED_DIGITS`)."""
    return None if value is None else round(float(value), digits)


def disclose_p_value(value: float | None) -> float | None:
    """A p-value computed on a hidden split, as disclosed (:data:`DISCLOSED_P_DIGITS` significant digits)."""
    return None if value is None else float(f"{float(value):.{DISCLOSED_P_DIGITS}g}")


def printed_digits(hidden: bool) -> int:
    """Decimals a page prints of a value computed on a ``hidden`` split's labels or on public ones: a hidden
    split's were rounded to :data:`DISCLOSED_DIGITS` when disclosed, so more would print zeros that were never
    computed (0.731 as 0.7310); a public split's keep :data:`PUBLIC_DIGITS`."""
    return DISCLOSED_DIGITS if hidden else PUBLIC_DIGITS


def disclose(rows: Sequence[MetricRow], *, hidden: bool) -> list[MetricRow]:
    """The rows as a user may see them: unchanged on a public split; on a ``hidden`` split
    only aggregates of the whole submission, rounded to what the leaderboard shows.

    Every number a user sees that was computed on hidden labels is a channel to them (the
    README's *Threat model: hidden splits* bounds each), so on a hidden split:

    * values and confidence bounds keep :data:`DISCLOSED_DIGITS` decimals, p-values
      :data:`DISCLOSED_P_DIGITS` significant digits; ``details`` keep only
      :data:`DISCLOSED_DETAILS` (no per-point, per-state or per-sample values);
    * **no count that depends on the labels**: the numbers of valid and skipped states and
      of unequal candidate pairs go, and a ranking or selection row's ``num_points`` is the
      number of states the file scores (``details["num_states"]``); :data:`WITHHELD_ON_HIDDEN`
      metrics (sign agreement, a count of label signs) are withheld;
    * **ranking and selection** only for a file that scores every candidate of every state
      (``coverage`` 1, nothing dropped), otherwise withheld (:data:`WITHHELD_PARTIAL`): a file
      scoring K states, or padding the others with single candidates, read their per-state
      values from the mean, std and seeded bootstrap interval.  Of the ranking only the mean
      is shown: its std and interval are spreads over states, which a file that gives all but
      K states constant scores (each such state counts 0) turns into more equations on the
      K states' values;
    * **several samples**: the submission is scored on the mean prediction only; of the
      per-sample scores nothing is disclosed but how many samples there were
      (``details["samples"] == {"aggregation": "mean_prediction", "num_samples": n}``) --
      each sample scored on its own would let a file of n one-hot samples read n labels.

    A withheld row keeps the file's own counts (``num_points``, ``num_dropped``,
    ``coverage``) and says why in ``details["withheld"]``.  Idempotent: disclosing disclosed
    rows changes nothing.
    """
    if not hidden:
        return list(rows)
    return [_disclose_row(row) for row in rows]


def _withheld(row: MetricRow, reason: str, num_states: int | None = None) -> MetricRow:
    """``row`` with no value: only the file's counts (the states it scores, for a ranking or
    selection row) and ``reason``."""
    details: dict[str, Any] = {"withheld": reason}
    if num_states is not None:
        details["num_states"] = num_states
    return MetricRow(metric=row.metric, value=None, p_value=None,
                     num_points=row.num_points if num_states is None else num_states,
                     num_dropped=row.num_dropped, coverage=row.coverage, details=details)


def _disclose_row(row: MetricRow) -> MetricRow:
    """One row of a hidden split as :func:`disclose` shows it."""
    if row.details.get("withheld"):  # disclosed before
        return _withheld(row, row.details["withheld"], row.details.get("num_states"))
    if row.metric in WITHHELD_ON_HIDDEN:
        return _withheld(row, WITHHELD_COUNT)
    if metric_registry.get(row.metric).kind != "point":
        num_states = row.details.get("num_states")
        if num_states is None or row.coverage < 1.0 or row.num_dropped:
            return _withheld(row, WITHHELD_PARTIAL, int(num_states or 0))
        return MetricRow(metric=row.metric, value=disclose_value(row.value), p_value=None,
                         num_points=int(num_states), num_dropped=0, coverage=row.coverage,
                         insufficient=row.insufficient, details={"num_states": int(num_states)})
    details: dict[str, Any] = {}
    for key, value in row.details.items():
        if key == "ci95":
            details[key] = [disclose_value(v) for v in value]
        elif key in ("significance", "ci95_resampled"):
            details[key] = value
        elif key == "samples":
            details[key] = {"aggregation": value.get("aggregation", "mean_prediction"),
                            "num_samples": int(value.get("num_samples", 0))}
    return MetricRow(
        metric=row.metric,
        value=disclose_value(row.value),
        p_value=disclose_p_value(row.p_value),
        num_points=row.num_points,
        num_dropped=row.num_dropped,
        coverage=row.coverage,
        insufficient=row.insufficient,
        details=details,
    )
