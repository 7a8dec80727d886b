"""The site's Best-of-N track: running :mod:`qval.best_of_n` as a job, and reading its results.

Services: :func:`create_run` records a queued :class:`BestOfNRun` (or refuses it with an
:class:`InvalidRun` naming the bad argument); :func:`enqueue` sends it to the ``gpu`` queue, to the
task :data:`PLAY_TASK` by name (its module, :mod:`best_of_n.tasks`, imports this one);
:func:`start` claims it for a worker; :func:`play`
plays its missing episodes, storing each one as it finishes and stamping the run's heartbeat, then stores the
summary. A run's lifecycle is every job's (:data:`JOB`, :class:`jobs.services.JobKind`): a run interrupted with its
worker resumes at the next episode, requeued once by the reaper when its heartbeat stopped (failed the second time),
or at once when its worker restarts (:meth:`~jobs.services.JobKind.requeue_worker`).  Selectors: :func:`episodes_of`,
:func:`gain_over_base` and :func:`alignment` (per environment, each picker's test-split ρ against
its Best-of-N gain over the base policy, with the rank correlation across pickers).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from jobs.services import JobKind, run_kind
from jobs.reference import queue_missing
from board.evaluations import evaluations
from best_of_n.models import BestOfNEpisode, BestOfNRun
from leaderboard.models import Dataset
from learning import selectors as learning_selectors
from learning.models import TrainingRun
from qval import best_of_n as bon
from qval import families, metric_registry, schema
from qval.learned import methods as lm
from qval.learned.features import featuriser_from_spec
from qval.offthread import call_in_thread

log = logging.getLogger(__name__)

DEFINED_RHO = {"oracle": 1.0, "random": 0.0}
ALIGNMENT_METRICS = metric_registry.HEADLINES
"""The test-split metrics the alignment page can put on its x axis: global ρ (default) and state-local ρ
(how well a method ranks the candidates of one state: what a Best-of-N pick uses). The oracle and random
have the values of :data:`DEFINED_RHO` under both."""
"""The test-split ρ of the built-in pickers by definition: the oracle scores with the labels
themselves; random scores are independent of them."""

PICKER_FAMILY = {"oracle": "oracle", "random": "random"}
"""Legend groups of the built-in pickers on the alignment page (methods use their family's name)."""


def _interval(i: bon.Interval) -> dict[str, float | None]:
    """``i`` as JSON: an undefined bound (NaN) is ``null``, which strict JSON parsers accept."""
    return {k: v if math.isfinite(v) else None for k, v in (("value", i.value), ("low", i.low), ("high", i.high))}


DEFAULT_N = 3
DEFAULT_EPISODES = 40
MAX_N = 1000
MAX_EPISODES = 100_000
SEED_LIMIT = 2**31
"""Runs take ``2 <= n <= MAX_N``, ``1 <= num_episodes <= MAX_EPISODES`` and ``0 <= seed < SEED_LIMIT``."""
PLAY_TASK = "workers.best_of_n.play_best_of_n"
"""The Celery task that plays a run (queue ``gpu``), sent by name: its module imports this one."""


class InvalidRun(bon.BestOfNError):
    """A run refused before it is created: ``field`` (``environment``, ``picker``, ``backbone``,
    ``training_run``, ``n``, ``episodes`` or ``seed``) and ``message``, what was expected."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def picker_choices() -> list[tuple[str, str]]:
    """Every picker :func:`create_run` accepts (the built-in ones, the reference policy, each registered
    method) with a label saying which need a backbone.  A registered method named like a built-in picker
    (the reference method ``random``) is that picker here: :func:`create_run` resolves the name to it."""
    from qval.methods.registry import all_methods

    def label(m: Any) -> str:
        if m.name in lm.METHODS:
            return f"{m.name} (a finished training run's model)"
        return m.name if m.needs == "none" else f"{m.name} (needs a backbone)"

    builtin = (*bon.BUILTIN_PICKERS, bon.REFERENCE)
    return [(p, p) for p in builtin] + [(m.name, label(m)) for m in all_methods() if m.name not in builtin]


def _training_run(picker: str, dataset_slug: str, training_run: int | None) -> TrainingRun | None:
    """The training run whose model a learned ``picker`` plays with: run ``training_run`` (checked), else the
    newest finished one of the method on the dataset; ``None`` for any other picker."""
    if picker not in lm.METHODS:
        if training_run is not None:
            raise InvalidRun("training_run", f"only a learned picker ({', '.join(lm.METHODS)}) plays with a "
                                             f"training run's model, not {picker}")
        return None
    if training_run is None:
        newest = learning_selectors.newest_finished(picker, dataset_slug)
        if newest is None:
            raise InvalidRun("picker", f"no finished training run of {picker} on {dataset_slug}: train one first "
                                       f"(/learned/ or manage.py train_learned --method {picker} --dataset {dataset_slug})")
        return newest
    chosen = learning_selectors.finished_runs().filter(pk=training_run).first()
    if chosen is None or chosen.method != picker or chosen.dataset.slug != dataset_slug:
        raise InvalidRun("training_run", f"training run #{training_run} is not a finished run of {picker} on "
                                         f"{dataset_slug}")
    return chosen


def create_run(environment: str, picker: str, *, n: int, num_episodes: int, seed: int = 0,
               backbone: str = "", training_run: int | None = None) -> BestOfNRun:
    """A queued run, after checking what can be checked without playing (environment, picker, settings);
    a bad argument is an :class:`InvalidRun` naming it.  A learned picker plays with the model of
    ``training_run`` (the id of a finished run of that method on the environment's dataset), by default
    the newest such run."""
    if environment not in bon.ENVIRONMENTS:
        raise InvalidRun("environment",
                         f"unknown environment {environment!r}; expected one of {', '.join(bon.ENVIRONMENTS)}")
    if picker not in bon.BUILTIN_PICKERS and picker != bon.REFERENCE:
        from qval.methods.registry import MethodError, get_method

        try:
            needs = get_method(picker).needs
        except MethodError as exc:  # names the known methods
            raise InvalidRun("picker", f"{exc}; or one of {', '.join((*bon.BUILTIN_PICKERS, bon.REFERENCE))}") from exc
        if needs != "none" and not backbone:
            raise InvalidRun("backbone", f"method {picker} needs a backbone ({needs}): a URL, unix:PATH or "
                                         "checkpoint folder")
    trained = _training_run(picker, bon.DATASET_SLUGS[environment], training_run)
    if not 2 <= n <= MAX_N:
        raise InvalidRun("n", f"n must be at least 2 and at most {MAX_N} (candidates per step), got {n}")
    if not 1 <= num_episodes <= MAX_EPISODES:
        raise InvalidRun("episodes", f"the number of episodes must be from 1 to {MAX_EPISODES}, got {num_episodes}")
    if not 0 <= seed < SEED_LIMIT:
        raise InvalidRun("seed", f"the seed must be from 0 to {SEED_LIMIT - 1}, got {seed}")
    return BestOfNRun.objects.create(environment=environment, dataset_slug=bon.DATASET_SLUGS[environment], picker=picker,
                                     backbone=backbone, training_run=trained, n=n, seed=seed, num_episodes=num_episodes)


REFERENCE_PICKERS: tuple[str, ...] = ("base", "oracle", "random")
"""The built-in pickers of the reference runs: the actor's own choice, the labels' choice and chance."""
REFERENCE_N = 2
REFERENCE_EPISODES = 20
"""The reference runs' setting: the actor's action and one other per step, 20 episodes (seed 0). Small on
purpose: they share the ``gpu`` queue with every other job, the oracle rolls each candidate out, and an
ALFWorld or MiniWoB step costs seconds; enough to fill the pages and show the gap between the pickers."""


def queue_reference_runs(datasets: Iterable[Dataset]) -> list[BestOfNRun]:
    """Queue the Best-of-N reference rows: a run of each of :data:`REFERENCE_PICKERS` at :data:`REFERENCE_N`
    with :data:`REFERENCE_EPISODES` episodes, seed 0, in the environment of each of ``datasets`` that the track
    plays (:data:`qval.best_of_n.DATASET_SLUGS`); return the runs queued (each sent to ``gpu`` once the
    transaction commits).

    Nothing is queued without the test-split secret (``QVAL_TEST_SPLIT_SECRET``: the episodes' tasks are
    drawn from it), and the reason is logged.  A picker that already has such a run that did not fail is
    skipped, so calling this again queues nothing new and a failed run is queued again; the dataset's row is
    locked meanwhile, so two callers never queue the same run twice.
    """
    environments = {slug: env for env, slug in bon.DATASET_SLUGS.items()}
    played = [ds for ds in datasets if ds.slug in environments]
    if not played:
        return []
    if not settings.QVAL_TEST_SPLIT_SECRET:
        log.warning("no Best-of-N reference runs queued on %s: QVAL_TEST_SPLIT_SECRET is not set, and the "
                    "episodes' tasks are drawn from it", ", ".join(ds.key for ds in played))
        return []
    queued: list[BestOfNRun] = []
    for ds in played:
        environment = environments[ds.slug]

        def launch(picker: str, environment: str = environment) -> BestOfNRun:
            run = enqueue(create_run(environment, picker, n=REFERENCE_N, num_episodes=REFERENCE_EPISODES))
            log.info("reference Best-of-N run %s queued: %s on %s", run.pk, picker, environment)
            return run

        queued += queue_missing(
            ds, REFERENCE_PICKERS,
            BestOfNRun.objects.filter(
                environment=environment, n=REFERENCE_N, seed=0, num_episodes=REFERENCE_EPISODES, backbone="")
            .exclude(status=BestOfNRun.FAILED).values_list("picker", flat=True),
            launch)
    return queued


JOB: JobKind[BestOfNRun] = run_kind("best-of-n run", BestOfNRun, PLAY_TASK)
"""Best-of-N runs as a job kind (registered in :mod:`jobs.registry`)."""


def start(run_id: int, worker: str) -> BestOfNRun | None:
    """Claim a queued (or redelivered running) run for ``worker`` (:meth:`jobs.services.JobKind.claim`); ``None``
    when it is final or another delivery runs it with a fresh heartbeat."""
    return JOB.claim(run_id, None, worker)


def _picker(run: BestOfNRun) -> bon.Picker | None:
    """The picker a run names (``None``: the reference policy acts)."""
    if run.picker == bon.REFERENCE:
        return None
    if run.picker in bon.BUILTIN_PICKERS:
        return bon.BUILTIN_PICKERS[run.picker]
    if run.training_run is not None:  # a learned method: its trained model scores the candidates
        trained = run.training_run
        scorer = lm.Scorer.open(trained.model_dir, featuriser_from_spec(trained.featuriser))
        return bon.score_picker(scorer.score_candidates)
    loaded = Dataset.objects.filter(slug=run.dataset_slug).order_by("-created_at").first()
    if loaded is None:
        raise bon.BestOfNError(f"method {run.picker} needs the dataset {run.dataset_slug} loaded (its method context)")
    folder = loaded.folder
    cache = Path(settings.QVAL_DATA_DIR) / "cache" / "best-of-n" / str(run.pk)
    return bon.method_picker(run.picker, schema.Dataset.read(folder), run.backbone, seed=run.seed, cache_dir=cache,
                             dataset_dir=folder)


def play(run: BestOfNRun) -> BestOfNRun:
    """Play the run's episodes not stored yet (each stored as it finishes), then store the summary.

    The environment runs in a thread of its own (:func:`qval.offthread.call_in_thread`): MiniWoB's Playwright
    runs an event loop in the thread that drives it, where Django refuses database calls, so episodes are
    stored here, and a failed save stops the play.
    """
    with JOB.beating(run):
        picker = _picker(run)
        done = set(run.episodes.values_list("index", flat=True))
        secret = settings.QVAL_TEST_SPLIT_SECRET

        def play_missing(on_episode: Callable[[bon.Episode], None]) -> None:
            env, spec = bon.environment(run.environment, secret)
            try:
                setting = bon.setting_for(run.environment, env, spec, n=run.n, seed=run.seed,
                                          num_episodes=run.num_episodes)
                bon.run_episodes(env, setting, picker, done=done, on_episode=on_episode)
            finally:
                env.close()

        def store(episode: bon.Episode) -> None:
            try:
                with transaction.atomic():
                    BestOfNEpisode.objects.create(run=run, index=episode.index, task=episode.task,
                                                  success=episode.success,
                                                  discounted_return=episode.discounted_return,
                                                  steps=episode.to_json()["steps"])
            except IntegrityError:  # stored by a duplicate delivery meanwhile: the same episode
                pass
            BestOfNRun.objects.filter(pk=run.pk).update(done=run.episodes.count())

        call_in_thread(play_missing, store, name=f"best-of-n-{run.pk}")
    summary = bon.summarise(episodes_of(run), seed=run.seed)
    JOB.finish(run.pk, run.attempt, done=summary.episodes, summary={
        "episodes": summary.episodes, "success": _interval(summary.success),
        "mean_return": _interval(summary.mean_return)})
    run.refresh_from_db()
    return run


def enqueue(run: BestOfNRun) -> BestOfNRun:
    """Send a queued run to :data:`PLAY_TASK` once the transaction that created it commits
    (:meth:`jobs.services.JobKind.submit`: a message that cannot reach the broker is sent again by the reaper)."""
    return JOB.submit(run)


# -- selectors -----------------------------------------------------------------------------
def episodes_of_one(stored: BestOfNEpisode) -> bon.Episode:
    """A stored episode as :class:`qval.best_of_n.Episode`."""
    return bon.Episode.from_json({"index": stored.index, "task": stored.task, "steps": stored.steps,
                                  "discounted_return": stored.discounted_return, "success": stored.success})


def episodes_of(run: BestOfNRun) -> list[bon.Episode]:
    """The run's stored episodes, by index."""
    return [episodes_of_one(e) for e in run.episodes.order_by("index")]


def baseline_run(run: BestOfNRun, picker: str = "base") -> BestOfNRun | None:
    """The latest finished run of ``picker`` with the same episodes (environment, N, seed, count)."""
    return (BestOfNRun.objects.filter(environment=run.environment, n=run.n, seed=run.seed,
                                      num_episodes=run.num_episodes, picker=picker, status=BestOfNRun.FINISHED)
            .order_by("-finished_at", "-pk").first())


def gain_over_base(run: BestOfNRun) -> bon.Interval | None:
    """The run's success-rate gain over the base policy's run on the same episodes (paired), or ``None``."""
    base = baseline_run(run)
    if base is None or run.status != BestOfNRun.FINISHED:
        return None
    return bon.gain(episodes_of(run), episodes_of(base), seed=run.seed)


def test_rho(method: str, dataset_slug: str, backbone: str = "", metric: str = metric_registry.HEADLINE) -> float | None:
    """The latest test-split, target-q ``metric`` (one of :data:`ALIGNMENT_METRICS`; default global Spearman ρ)
    of ``method`` on the dataset (any version), from an evaluation with backbone ``backbone`` when there is
    one, else from any; for ``oracle`` and ``random`` the value they have by definition."""
    if method in DEFINED_RHO:
        return DEFINED_RHO[method]
    rows = [e for e in evaluations()
            if e.method == method and e.dataset.partition("@")[0] == dataset_slug and e.split == "test"
            and e.target == "q" and e.value(metric) is not None]
    same = [e for e in rows if backbone and e.backbone == backbone]
    chosen = (same or rows)[-1:]
    return chosen[0].value(metric) if chosen else None


def picker_rho(run: BestOfNRun, metric: str = metric_registry.HEADLINE) -> float | None:
    """The test ``metric`` of a run's picker: for a learned one, the test-split, target-q value its training
    run published (the model that picked); else :func:`test_rho`."""
    if run.training_run_id is None:
        return test_rho(run.picker, run.dataset_slug, run.backbone, metric)
    published = set(run.training_run.submissions.values_list("pk", flat=True))
    rows = [e for e in evaluations() if e.submission_id in published and e.split == "test" and e.target == "q"
            and e.value(metric) is not None]
    return rows[-1].value(metric) if rows else None


@dataclass(frozen=True)
class AlignmentPoint:
    """One picker on one environment: its test ρ (x) and Best-of-N gain over the base policy (y)."""

    run_id: int
    method: str
    group: str
    color: str
    rho: float
    gain: bon.Interval


@dataclass(frozen=True)
class Alignment:
    """The points of one environment and N, and the rank correlation of ρ and gain across them."""

    environment: str
    n: int
    points: list[AlignmentPoint]
    correlation: bon.Interval | None
    metric: str = metric_registry.HEADLINE
    """The metric of the points' ρ (one of :data:`ALIGNMENT_METRICS`)."""


def _group(picker: str) -> tuple[str, str]:
    if picker in PICKER_FAMILY:
        return PICKER_FAMILY[picker], "#000000" if picker == "oracle" else "#888888"
    try:
        from qval.methods.registry import get_method

        family = families.get(get_method(picker).family)
    except Exception:  # noqa: BLE001 - a method no longer registered is drawn as "other"
        family = families.OTHER
    return family.name, family.colour


def alignment(metric: str = metric_registry.HEADLINE) -> list[Alignment]:
    """Per environment and N: every picker's latest finished run that has a test ``metric`` (one of
    :data:`ALIGNMENT_METRICS`) and a base run to compare with, as a point, and Spearman ρ across the
    points with a bootstrap CI."""
    if metric not in ALIGNMENT_METRICS:
        raise ValueError(f"unknown alignment metric {metric!r}; choose one of {', '.join(ALIGNMENT_METRICS)}")
    latest: dict[tuple[str, int, str], BestOfNRun] = {}
    for run in BestOfNRun.objects.filter(status=BestOfNRun.FINISHED).select_related("training_run").order_by(
            "finished_at", "pk"):
        latest[(run.environment, run.n, run.picker)] = run
    out: dict[tuple[str, int], list[AlignmentPoint]] = {}
    for (environment, n, picker), run in sorted(latest.items()):
        if picker in ("base", bon.REFERENCE):
            continue
        rho = picker_rho(run, metric)
        g = gain_over_base(run)
        if rho is None or g is None or not math.isfinite(rho):
            continue
        group, color = _group(picker)
        out.setdefault((environment, n), []).append(
            AlignmentPoint(run_id=run.pk, method=picker, group=group, color=color, rho=rho, gain=g))
    result = []
    for (environment, n), points in sorted(out.items()):
        corr = bon.rank_correlation([p.rho for p in points], [p.gain.value for p in points])
        result.append(Alignment(environment=environment, n=n, points=points, correlation=corr, metric=metric))
    return result


@dataclass(frozen=True)
class PickerResult:
    """One picker's latest finished run on an environment and N: its success rate and mean return with their 95%
    CIs (the run's summary) and its paired gain over the base policy on the same episodes (``None`` for the base
    policy itself, or without a base run)."""

    run_id: int
    picker: str
    color: str
    episodes: int
    success: bon.Interval
    mean_return: bon.Interval
    gain: bon.Interval | None


def _summary_interval(value: object) -> bon.Interval | None:
    """An interval stored in a run's summary (``{"value", "low", "high"}``), ``None`` where it is not one."""
    if not isinstance(value, dict) or not all(isinstance(value.get(k), (int, float)) for k in ("value", "low", "high")):
        return None
    return bon.Interval(float(value["value"]), float(value["low"]), float(value["high"]))


def results() -> dict[tuple[str, int], list[PickerResult]]:
    """Per environment and N (in order), every picker's latest finished run, base policy first, then by success
    rate: what the Best-of-N page shows first."""
    latest: dict[tuple[str, int, str], BestOfNRun] = {}
    for run in BestOfNRun.objects.filter(status=BestOfNRun.FINISHED).order_by("finished_at", "pk"):
        latest[(run.environment, run.n, run.picker)] = run
    out: dict[tuple[str, int], list[PickerResult]] = {}
    for (environment, n, picker), run in sorted(latest.items()):
        success = _summary_interval(run.summary.get("success"))
        mean_return = _summary_interval(run.summary.get("mean_return"))
        if success is None or mean_return is None:
            continue
        out.setdefault((environment, n), []).append(PickerResult(
            run.pk, picker, _group(picker)[1], int(run.summary.get("episodes", run.done)), success, mean_return,
            None if picker == "base" else gain_over_base(run)))
    for rows in out.values():
        rows.sort(key=lambda r: (r.picker != "base", -r.success.value, r.picker))
    return out


def alignment_json(alignments: list[Alignment]) -> list[dict[str, Any]]:
    """The numbers behind the alignment page (``?format=json``)."""
    return [{"environment": a.environment, "n": a.n, "metric": a.metric,
             "rank_correlation": _interval(a.correlation) if a.correlation else None,
             "points": [{"run": p.run_id, "method": p.method, "group": p.group, "rho": p.rho,
                         "gain": _interval(p.gain)} for p in a.points]} for a in alignments]
