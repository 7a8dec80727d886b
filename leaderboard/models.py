"""Datasets (inputs and hidden labels), methods and backbones.

Inputs (:class:`State`, :class:`Candidate`) and labels (:class:`Label`) live in separate
tables so that no query written for inputs can return a label by accident. A dataset
version is immutable: it is loaded once from a directory written by :mod:`qval.build`, and
its ``fingerprint`` is the content hash :meth:`qval.schema.Dataset.compute_fingerprint`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import models
from django.utils import timezone

from jobs.models import Run
from jobs.progress import Progress, time_left_words
from qval import families

SPLIT_CHOICES = [("train", "train"), ("dev", "dev"), ("test", "test")]
TARGET_CHOICES = [("q", "Q (state–action)"), ("v", "V (state)")]
MODALITY_CHOICES = [("text", "text"), ("image", "image")]


class Environment(models.Model):
    """A multi-turn environment datasets are collected from (FrozenLake, ALFWorld, …)."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    url = models.URLField(blank=True)
    open_book = models.BooleanField(
        default=False,
        help_text="Its labels follow from its observations (a FrozenLake observation is the whole map), so no split "
                  "of it is hidden: an open-book sanity check whose test board ranks only platform-run rows.",
    )

    def __str__(self) -> str:
        return self.name


def dataset_folder(slug: str, version: str) -> Path:
    """Where the files of dataset ``slug@version`` are (``images/`` among them): the one place that says so,
    ``QVAL_DATASETS_DIR/<slug>-<version>``. A loaded dataset's is :attr:`Dataset.folder`."""
    return Path(settings.QVAL_DATASETS_DIR) / f"{slug}-{version}"


class Dataset(models.Model):
    """One immutable, versioned dataset such as ``frozenlake-8x8@1.0``."""

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="datasets")
    slug = models.SlugField()
    version = models.CharField(max_length=20)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    fingerprint = models.CharField(max_length=64)
    modalities = models.JSONField(default=list)
    manifest = models.JSONField(default=dict, help_text="Provenance and build configuration.")
    hosted = models.BooleanField(
        default=True, help_text="False for the authors' datasets of imported results: no inputs or labels here."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    replaced_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="The version whose fresh hidden split replaced this one's (budgets): its boards are frozen.")
    retired_at = models.DateTimeField(null=True, blank=True, help_text="When its hidden split was replaced.")
    retired_reason = models.CharField(max_length=100, blank=True, help_text="Why its hidden split was replaced.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["slug", "version"], name="dataset_slug_version")]
        ordering = ["slug", "-version"]

    def __str__(self) -> str:
        return self.key

    @property
    def folder(self) -> Path:
        """Its files under ``QVAL_DATASETS_DIR`` (:func:`dataset_folder`)."""
        return dataset_folder(self.slug, self.version)

    @property
    def key(self) -> str:
        """``slug@version``."""
        return f"{self.slug}@{self.version}"

    @property
    def secret_test(self) -> bool:
        """Whether the test split was drawn from the maintainer's secret (:mod:`qval.hidden`)."""
        return bool(self.manifest.get("config", {}).get("collection", {}).get("secret_test"))

    def superseded_test_split(self) -> "Dataset | None":
        """A newer version of this dataset whose test split is secret, when this one's is not: this
        version's test split can be rebuilt from public information, so it takes no test submissions."""
        if self.secret_test:
            return None
        newer = [d for d in Dataset.objects.filter(slug=self.slug).exclude(pk=self.pk) if d.secret_test]
        return max(newer, key=lambda d: d.created_at, default=None)

    def labels_have_both_signs(self, target: str) -> bool:
        """Whether some label of ``target`` is positive and some negative (:func:`qval.metrics.both_signs`);
        sign agreement is shown only then.  A hosted dataset answers from its public splits (a hidden
        split's labels never decide what a page shows), an authors' dataset from the labels its
        paper publishes (:func:`qval.paper.truth`; ``True`` where there are none: nothing is
        hidden)."""
        from qval import metrics, paper
        from qval.paper.base import PublishedDataError
        from qval.schema import PUBLIC_SPLITS

        if not self.hosted:
            try:
                return metrics.both_signs(paper.truth(self.slug, target).point_labels)
            except PublishedDataError:
                return True
        labels = Label.objects.filter(labelset__dataset=self, split__in=sorted(PUBLIC_SPLITS), target=target)
        return labels.filter(value__gt=0).exists() and labels.filter(value__lt=0).exists()

    @classmethod
    def newest_hosted(cls) -> list["Dataset"]:
        """The newest version (latest created) of each hosted dataset, by slug: what takes submissions. The
        authors' datasets of the imported QVal v1.0 results are not hosted (no inputs or labels here)."""
        newest: dict[str, Dataset] = {}
        for d in cls.objects.filter(hosted=True).select_related("environment").order_by("slug", "-created_at"):
            newest.setdefault(d.slug, d)
        return list(newest.values())

    @classmethod
    def lookup(cls, key: str) -> "Dataset | None":
        """The dataset named ``slug@version``, or the newest version of ``slug``."""
        slug, _, version = key.partition("@")
        qs = cls.objects.filter(slug=slug)
        if version:
            qs = qs.filter(version=version)
        return qs.order_by("-created_at").first()


class State(models.Model):
    """A sampled state of a trajectory (one pointwise V point, one ranking point)."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="states")
    external_id = models.CharField(max_length=100)
    position = models.PositiveIntegerField(help_text="Order of the state in the dataset.")
    split = models.CharField(max_length=8, choices=SPLIT_CHOICES)
    trajectory = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    task = models.CharField(max_length=200)
    observation = models.TextField()
    history = models.JSONField(default=list)
    image = models.CharField(max_length=300, blank=True, null=True)
    end_image = models.CharField(
        max_length=300, blank=True, null=True,
        help_text="Goal image: the final state of the reference rollout from this state (withheld on hidden splits).",
    )
    task_type = models.CharField(
        max_length=100, blank=True, null=True,
        help_text="The kind of task (ALFWorld's task type), where the environment has several kinds.",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dataset", "external_id"], name="state_unique_id")]
        indexes = [models.Index(fields=["dataset", "split", "position"])]
        ordering = ["position"]


class Candidate(models.Model):
    """A candidate action of a state; exactly one per state is the actor's action."""

    state = models.ForeignKey(State, on_delete=models.CASCADE, related_name="candidates")
    external_id = models.CharField(max_length=100)
    index = models.PositiveSmallIntegerField()
    action = models.TextField()
    next_state = models.TextField()
    is_actor = models.BooleanField()
    next_image = models.CharField(max_length=300, blank=True, null=True)
    end_image = models.CharField(
        max_length=300, blank=True, null=True,
        help_text="Goal image: the final state of the reference rollout after this action (withheld on hidden splits).",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["state", "index"], name="candidate_unique_index")]
        indexes = [models.Index(fields=["external_id"])]
        ordering = ["state__position", "index"]


class LabelSet(models.Model):
    """How a dataset's labels were produced (reference policy, γ, rollouts, aggregation)."""

    dataset = models.OneToOneField(Dataset, on_delete=models.CASCADE, related_name="labelset")
    reference_policy = models.CharField(max_length=200)
    discount = models.FloatField()
    num_rollouts = models.PositiveIntegerField()
    aggregation = models.CharField(max_length=20, default="max")
    horizon = models.PositiveIntegerField(null=True)


class Label(models.Model):
    """A reference value: Q of a candidate (target q) or V of a state (target v).

    Test-split labels must never reach a user: only the scoring worker and the
    maintainer-only ``export_labels`` command read this table for the test split.
    """

    labelset = models.ForeignKey(LabelSet, on_delete=models.CASCADE, related_name="labels")
    split = models.CharField(max_length=8, choices=SPLIT_CHOICES)
    target = models.CharField(max_length=1, choices=TARGET_CHOICES)
    item_id = models.CharField(max_length=100, help_text="Candidate id (q) or state id (v).")
    value = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["labelset", "target", "item_id"], name="label_unique")]
        indexes = [models.Index(fields=["labelset", "split", "target"])]


class Method(models.Model):
    """A dense supervision method (one row per name; backbones are separate)."""

    FAMILIES = families.CHOICES
    name = models.CharField(max_length=100, unique=True)
    family = models.CharField(max_length=20, choices=FAMILIES, default="other")
    description = models.TextField(blank=True)
    paper_url = models.URLField(blank=True)
    code_url = models.URLField(blank=True)

    def __str__(self) -> str:
        return self.name


class Backbone(models.Model):
    """The model a method runs on (an LLM, a VLM, CLIP, …)."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)

    def __str__(self) -> str:
        return self.name


class DatasetBuild(Run):
    """One run of a dataset builder (:data:`qval.build.BUILDERS`), queued on ``datasets`` or inline.

    ``queued`` → ``running`` → ``finished`` (``dataset_key``/``fingerprint`` set, the dataset
    loaded) or ``failed`` (``error`` says why), with the lifecycle of every job (:class:`jobs.models.Run`,
    :data:`leaderboard.building.JOB`): while running it stamps ``heartbeat_at``, and a build whose worker was
    lost is queued again once (it resumes from its checkpoint), then failed. ``stage``/``done``/``total`` is the
    builder's progress and ``updated_at`` its last report; each report moves the ``deadline`` to
    ``QVAL_BUILD_STALL_S`` later, so a build that stops progressing (hung) is failed by the reaper, like one not
    started within ``QVAL_BUILD_QUEUE_S`` of being queued; the restart of its worker fails it at once.
    """

    name = models.CharField(max_length=50, help_text="Builder name, a key of qval.build.BUILDERS.")
    refresh = models.PositiveIntegerField(
        default=0, help_text="Fresh hidden split number (qval.build.refreshed): 0 builds the builder's version, "
                             "n its version '-rn', a new test split drawn from the secret.")
    stage = models.CharField(max_length=50, blank=True)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    stage_started_at = models.DateTimeField(null=True, blank=True, help_text="When the current stage began.")
    stage_start_done = models.PositiveIntegerField(
        default=0, help_text="'done' at the start of the current stage (a resumed build's checkpointed states).")
    updated_at = models.DateTimeField(null=True, blank=True, help_text="Last progress report.")
    dataset_key = models.CharField(max_length=120, blank=True)
    fingerprint = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["name", "status"])]

    def __str__(self) -> str:
        return f"build #{self.pk} {self.name} ({self.status})"

    @property
    def job_progress(self) -> Progress:
        """The current stage's progress (a finished build's: all of it), with :meth:`seconds_left`."""
        total = self.total if self.status != self.FINISHED else max(self.total, self.done, 1)
        done = self.done if self.status != self.FINISHED else total
        return Progress(done=done, total=total, stage=self.stage, seconds_left=self.seconds_left())

    def seconds_left(self, now: datetime | None = None) -> float | None:
        """Estimated seconds until the current stage ends: its rate since it started (items done in
        this stage per second, up to the last report) applied to the items left, less the time since
        that report; ``None`` when not running or nothing has been done in the stage yet."""
        if self.status != self.RUNNING or self.stage_started_at is None or self.updated_at is None:
            return None
        done_in_stage = self.done - self.stage_start_done
        elapsed = (self.updated_at - self.stage_started_at).total_seconds()
        if done_in_stage <= 0 or elapsed <= 0 or self.total <= self.done:
            return None
        left = (self.total - self.done) * elapsed / done_in_stage
        since_report = ((now or timezone.now()) - self.updated_at).total_seconds()
        return max(left - max(since_report, 0.0), 0.0)

    @property
    def time_left(self) -> str:
        """:meth:`seconds_left` in words ("about 23 min left"), or "" without an estimate."""
        return time_left_words(self.seconds_left())

    def as_dict(self) -> dict[str, object]:
        """JSON-friendly form (API, status polling)."""
        def iso(t):  # type: ignore[no-untyped-def]
            return t.isoformat() if t else None

        return {
            "id": self.pk, "name": self.name, "status": self.status, "stage": self.stage, "done": self.done,
            "total": self.total, "percent": self.job_progress.percent, "created_at": iso(self.created_at),
            "started_at": iso(self.started_at), "updated_at": iso(self.updated_at),
            "finished_at": iso(self.finished_at), "dataset": self.dataset_key, "fingerprint": self.fingerprint,
            "error": self.error, "worker": self.worker, "stage_started_at": iso(self.stage_started_at),
            "seconds_left": None if (left := self.seconds_left()) is None else round(left),
            "time_left": self.time_left,
        }
