"""Submissions and their results.

A submission moves through ``received`` (stored by the web request) ``→ validating`` (checked
on a worker) ``→ queued → scoring → finished`` or ends ``failed`` at any step; every transition is timestamped and a failure carries a reason the
user can act on. :meth:`Submission.transition` is the only place that changes the state.

A submission is of one of two kinds: ``file`` (an uploaded predictions file, scored on the
``scoring`` queue) or ``container`` (an uploaded image archive that a ``gpu`` worker runs on the
split's inputs, ``scoring`` meaning "running and scoring"; its stdout/stderr, outcome and the
limits it ran under are kept, and the predictions it wrote) or ``baseline`` (a built-in method
of :mod:`qval.methods` that staff launched and a ``gpu`` worker runs, source ``baseline``; its
``config``, ``progress`` and NaN count are kept, and the predictions it wrote). Every submission carries a
``deadline`` while it is not final: past it, the reaper fails it. While ``scoring`` its worker sends heartbeats
(``heartbeat_at``); a job whose heartbeats stop is requeued once (``attempt`` 2), then failed as a platform fault
(the lifecycle of every job: :class:`jobs.models.Job`, :data:`submissions.lifecycle.JOB`). Every transition is appended to ``history`` with its
``attempt`` (never rewritten); a delivery of a job that is final or of an older attempt does nothing
(:mod:`submissions.lifecycle`).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from jobs.models import Job
from jobs.progress import Progress, rate_left
from leaderboard.models import MODALITY_CHOICES, SPLIT_CHOICES, TARGET_CHOICES, Backbone, Dataset, Method
from qval.schema import PUBLIC_SPLITS


class InvalidTransition(RuntimeError):
    """A state change the state machine does not allow."""


class Submission(Job):
    """One predictions file or method container scored on one dataset split and target: a job whose running state
    is ``scoring`` (:class:`jobs.models.Job`)."""

    RECEIVED, VALIDATING, QUEUED, SCORING, FINISHED, FAILED = (
        "received",
        "validating",
        "queued",
        "scoring",
        "finished",
        "failed",
    )
    STATES = [(s, s) for s in (RECEIVED, VALIDATING, QUEUED, SCORING, FINISHED, FAILED)]
    RUNNING = SCORING
    STATE_FIELD = "state"
    ALLOWED = {
        RECEIVED: {VALIDATING, FAILED},
        VALIDATING: {QUEUED, FAILED},
        QUEUED: {SCORING, FAILED},
        # Back to ``queued`` once when the worker running it stopped sending heartbeats.
        SCORING: {FINISHED, FAILED, SCORING, QUEUED},
        # Final: a late delivery of its job does nothing (submissions.lifecycle.claim).
        FINISHED: set(),
        FAILED: set(),
    }
    # Who caused a failure (Job.FAULT_USER, Job.FAULT_SYSTEM): only user-caused failures count towards the daily quota.
    KIND_FILE, KIND_CONTAINER, KIND_BASELINE = "file", "container", "baseline"
    KINDS = [(KIND_FILE, "predictions file"), (KIND_CONTAINER, "method container"),
             (KIND_BASELINE, "built-in method run by the platform")]

    # Where the row comes from (the badge shown wherever it appears).
    SOURCE_USER, SOURCE_BASELINE, SOURCE_RESCORED, SOURCE_REPORTED = "user", "baseline", "rescored", "reported"
    SOURCES = [
        (SOURCE_USER, "user"),
        (SOURCE_BASELINE, "baseline"),
        (SOURCE_RESCORED, "re-scored from published predictions"),
        (SOURCE_REPORTED, "reported by the authors"),
    ]
    IMPORTED_SOURCES = (SOURCE_RESCORED, SOURCE_REPORTED)

    # Null only for imported rows (reported or re-scored results have no uploader).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="submissions"
    )
    source = models.CharField(max_length=10, choices=SOURCES, default=SOURCE_USER)
    rules = models.CharField(
        max_length=20, default="qval", help_text="Scoring rules (qval.metrics.RULES): ours, or qval-v1.0 (the reference's)."
    )
    provenance = models.JSONField(
        default=dict, blank=True, help_text="Imported rows: repository, commit, file and entry they come from."
    )
    import_key = models.CharField(
        max_length=300, null=True, blank=True, unique=True,
        help_text="Imported rows: a stable key, so importing again updates instead of duplicating.",
    )
    kind = models.CharField(max_length=10, choices=KINDS, default=KIND_FILE)
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="submissions")
    split = models.CharField(max_length=8, choices=SPLIT_CHOICES)
    target = models.CharField(max_length=1, choices=TARGET_CHOICES)
    method_name = models.CharField(max_length=100)
    backbone_name = models.CharField(max_length=100, blank=True)
    # Linked when the submission finishes, so a failed upload adds nothing to the registry.
    method = models.ForeignKey(Method, on_delete=models.PROTECT, null=True, blank=True, related_name="submissions")
    backbone = models.ForeignKey(Backbone, on_delete=models.PROTECT, null=True, blank=True, related_name="submissions")
    modality = models.CharField(max_length=8, choices=MODALITY_CHOICES, default="text")
    # The method card and the submitter's choice of who sees the row (a private one: its owner only).
    public = models.BooleanField(
        default=True, help_text="Shown on the public boards, figures and its permalink; private: to its owner only.")
    description = models.TextField(blank=True, help_text="Method card: what the method is, in a few sentences.")
    paper_url = models.URLField(max_length=300, blank=True, help_text="Method card: the paper (optional).")
    code_url = models.URLField(max_length=300, blank=True, help_text="Method card: the code (optional).")
    open_weights = models.BooleanField(
        null=True, blank=True, help_text="Method card: whether the backbone's weights are open (null: not said).")
    filename = models.CharField(max_length=255)
    file = models.FileField(upload_to="submissions/%Y/%m/", blank=True)
    file_format = models.CharField(max_length=20, blank=True)
    parsed = models.FileField(
        upload_to="parsed/%Y/%m/", blank=True,
        help_text="Predictions files: what the check of the upload parsed (qval.parsed_predictions), which its "
                  "scoring and its Ladder step read instead of parsing the file again.")
    size_bytes = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=12, choices=STATES, default=RECEIVED)
    problems = models.JSONField(default=list, blank=True, help_text="Every validation problem found.")
    fault = models.CharField(max_length=8, blank=True)
    coverage = models.JSONField(default=dict, blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    validating_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True, help_text="When it was last queued.")
    scoring_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    # Container submissions only (``file`` is then the uploaded archive, shared by the
    # submissions of one upload).
    image_id = models.CharField(max_length=64, blank=True, help_text="Hex SHA-256 of the image configuration.")
    limits = models.JSONField(default=dict, blank=True, help_text="The qval.containers.Limits the container ran under.")
    container_outcome = models.CharField(
        max_length=500, blank=True,
        help_text="How the run ended: 'finished' or the runner's reason (timeout, out of memory, exited with code N, ...).",
    )
    exit_code = models.IntegerField(null=True, blank=True)
    wall_s = models.FloatField(null=True, blank=True, help_text="Seconds the container ran.")
    token_usage = models.JSONField(
        default=dict, blank=True, help_text="Backbone tokens the container used (qval.backbone.Usage.as_dict).")
    stdout = models.TextField(blank=True, help_text="First and last 64 KiB of the container's stdout.")
    stderr = models.TextField(blank=True, help_text="First and last 64 KiB of the container's stderr.")
    # Baseline runs only (a built-in method of qval.methods run by a gpu worker, source "baseline").
    config = models.JSONField(
        default=dict, blank=True,
        help_text="Baseline runs: method and version, prompt hash, backbone and checkpoint hash, sampling "
                  "parameters, seed, options, and the run's counts (requests, cache hits, tokens).")
    progress = models.JSONField(
        default=dict, blank=True, help_text="Baseline runs: done, total, tokens, started/updated times (UTC ISO).")
    num_nan = models.IntegerField(
        null=True, blank=True, help_text="Baseline runs: points the method could not score (NaN).")
    attempt = models.PositiveSmallIntegerField(
        default=0, help_text="How many times it was sent to a worker (the reaper requeues a lost job once).")
    history = models.JSONField(
        default=list, blank=True,
        help_text="Every transition, appended in order and never rewritten: state, time (UTC ISO) and attempt.")
    predictions = models.FileField(
        upload_to="predictions/%Y/%m/", blank=True,
        help_text="Container and baseline submissions: the predictions.jsonl they wrote, as scored; re-scored "
                  "rows: the published per-point predictions, as a predictions file.")
    # The Ladder of a hidden split (submissions.ladder): set once, when a user's submission finishes.
    ladder_climbed = models.BooleanField(
        null=True, blank=True,
        help_text="Hidden split, user submissions: whether it moved the account's ladder (the board shows its "
                  "score; the first of its scope always does) or not (the board keeps the best's score and its "
                  "own is not shown); empty off the ladder (public splits, baselines, imports, finished before it).")
    ladder_against = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="The account's best it was compared with (empty for the first of its scope): the score the "
                  "board keeps when it did not climb, the one it replaced when it did.")

    class Meta:
        ordering = ["-received_at"]
        indexes = [
            models.Index(fields=["user", "split", "received_at"]),
            models.Index(fields=["state", "deadline"]),
            models.Index(fields=["state", "split", "target"]),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.method_name} on {self.dataset.key}/{self.split} ({self.state})"

    @property
    def submitted_by(self) -> str:
        """The uploader's name, or the source of an imported row."""
        return self.user.username if self.user_id else self.get_source_display()

    @classmethod
    def platform_run(cls) -> models.Q:
        """Submissions whose predictions the platform made itself -- a built-in baseline, a method container
        (its archive kept), a training run's scores -- rather than an uploaded file."""
        trained = cls.training_runs.through.objects.filter(submission_id=models.OuterRef("pk"))
        return (models.Q(kind__in=(cls.KIND_CONTAINER, cls.KIND_BASELINE)) | models.Q(source=cls.SOURCE_BASELINE)
                | models.Q(models.Exists(trained)))

    @classmethod
    def rankable(cls) -> models.Q:
        """Submissions the board may rank: all but those not :meth:`platform_run` on a hidden split of a dataset
        we host whose environment is open book (:attr:`leaderboard.models.Environment.open_book`: its labels
        follow from its observations, so an uploaded file there may simply contain them)."""
        open_book_hidden = (models.Q(dataset__hosted=True, dataset__environment__open_book=True)
                            & ~models.Q(split__in=sorted(PUBLIC_SPLITS)))
        return ~(open_book_hidden & ~cls.platform_run())

    def ranked(self) -> bool:
        """Whether the board ranks this submission once finished (:meth:`rankable`)."""
        return Submission.objects.filter(Submission.rankable(), pk=self.pk).exists()

    @property
    def score_withheld(self) -> bool:
        """Whether its own score is shown to nobody: a hidden-split submission that did not climb its
        account's ladder (:mod:`submissions.ladder`); the board keeps the best's score instead."""
        return self.ladder_climbed is False

    def transition(self, new_state: str, *, error: str = "", fault: str = "", save: bool = True) -> None:
        """Move to ``new_state``, stamping its time and appending it to :attr:`history`; raise
        :class:`InvalidTransition` if not allowed."""
        if new_state not in self.ALLOWED[self.state]:
            raise InvalidTransition(f"submission {self.pk}: cannot go from {self.state} to {new_state}")
        now = timezone.now()
        self.history = [*self._history(), {"state": new_state, "at": now.isoformat(), "attempt": self.attempt}]
        self.state = new_state
        setattr(self, f"{new_state}_at", now)
        if new_state == self.FAILED:
            self.error = error or "failed"
            self.fault = fault or self.FAULT_SYSTEM
        if save:
            self.save()

    def move(self, state: str, *, error: str = "", fault: str = "") -> None:
        """:meth:`transition` to ``state``, unsaved (how :mod:`jobs.services` moves every job)."""
        self.transition(state, error=error, fault=fault, save=False)

    @property
    def job_progress(self) -> Progress | None:
        """A baseline run's progress: points done, tokens, and the time left at this delivery's rate."""
        if self.kind != self.KIND_BASELINE:
            return None
        p = self.progress or {}
        return Progress(done=int(p.get("done", 0)), total=p.get("total"), unit="points",
                        detail=f"{p.get('tokens', 0)} tokens",
                        seconds_left=None if self.is_final else baseline_seconds_left(p))

    @property
    def running_since(self) -> datetime | None:
        """:attr:`scoring_at`: when its job last started."""
        return self.scoring_at

    def scored_predictions(self) -> tuple[str, str]:
        """``(path, file name)`` of the predictions this submission was scored on: the uploaded
        file, for a container the ``predictions.jsonl`` it wrote (never the image archive), for
        a re-scored row the published predictions the import stored."""
        if self.kind in (self.KIND_CONTAINER, self.KIND_BASELINE) or self.source == self.SOURCE_RESCORED:
            if not self.predictions:
                raise ValueError(f"{self.kind} submission {self.pk} has no stored predictions")
            return self.predictions.path, "predictions.jsonl"
        return self.file.path, self.filename

    def _history(self) -> list[dict[str, object]]:
        """:attr:`history`; for a row older than it, its latest transition per state from the ``*_at`` times."""
        if self.history or self.state == self.RECEIVED:
            return list(self.history)
        states = [self.RECEIVED, self.VALIDATING, self.QUEUED, self.SCORING, self.FINISHED, self.FAILED]
        return [{"state": s, "at": getattr(self, f"{s}_at").isoformat(), "attempt": self.attempt}
                for s in states if getattr(self, f"{s}_at")]

    def transitions(self) -> list[dict[str, object]]:
        """Every transition in order -- ``received`` first, then :attr:`history` (a requeued job's ``queued`` and
        ``scoring`` once per attempt) -- as ``{"state", "at" (datetime), "attempt"}``."""
        later = [{"state": e["state"], "at": datetime.fromisoformat(str(e["at"])), "attempt": e["attempt"]}
                 for e in self._history() if e["state"] != self.RECEIVED]
        return [{"state": self.RECEIVED, "at": self.received_at, "attempt": 0}, *later]

    def timeline(self) -> list[tuple[str, datetime]]:
        """``(state, timestamp)`` pairs of every transition that happened, in order (:meth:`transitions`)."""
        return [(str(t["state"]), t["at"]) for t in self.transitions()]  # type: ignore[misc]


class Result(models.Model):
    """One metric of a finished submission.

    ``value``/``p_value`` are null when the metric is undefined (constant predictions) or
    when fewer than the minimum number of usable points remained (``insufficient``).
    ``details`` keeps metric-specific numbers (std, valid/skipped counts, …).
    """

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="results")
    metric = models.CharField(max_length=40)
    value = models.FloatField(null=True)
    p_value = models.FloatField(null=True)
    num_points = models.PositiveIntegerField(default=0)
    num_dropped = models.PositiveIntegerField(default=0)
    coverage = models.FloatField(default=0.0)
    insufficient = models.BooleanField(default=False)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["submission", "metric"], name="result_unique_metric")]
        ordering = ["id"]


class ResultsVersion(models.Model):
    """Which version of the finished results the database holds: one row that PostgreSQL triggers
    (migration ``0011_results_version``) bump in the same transaction as every write to the results, to a
    finished submission or to a method; read by :func:`board.evaluations.current`.

    ``epoch`` is drawn anew at every bump (migration ``0014``), so two reads give the same version only when
    no other write came between them: not after the table was emptied (a test database flushed between
    tests), nor when a bump was rolled back and the counter reached the same value again."""

    epoch = models.CharField(max_length=32)
    counter = models.BigIntegerField(default=0)


def baseline_seconds_left(progress: dict[str, object]) -> float | None:
    """Seconds left of a baseline run whose ``progress`` is ``Submission.progress`` (``done``, ``total``, and
    ``first_at_done``/``first_at``/``at``: this delivery's first report and its last, epoch seconds), at this
    delivery's rate (:func:`jobs.progress.rate_left`); ``None`` before two reports."""
    return rate_left(progress.get("done"), progress.get("total"), progress.get("first_at_done"),  # type: ignore[arg-type]
                     progress.get("first_at"), progress.get("at"))  # type: ignore[arg-type]
