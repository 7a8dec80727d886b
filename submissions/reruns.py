"""Re-running the verified rows of a hidden split on the fresh split that replaces it.

A fresh hidden split is a new dataset version (:mod:`budgets`, :mod:`qval_site.fresh_splits`).  A row the
platform made the predictions of can be made again on it; an uploaded file cannot (it scored the old split's
inputs) and stays with the split it was scored on.  Two kinds live here:

* **baseline runs** (:func:`rerun_baselines`): every finished built-in method run on the old version's hidden
  splits, launched again with the same method, backbone, target, modality, seed and options
  (:func:`submissions.baselines.launch_baseline`) unless the new version has that run already;
* **method containers** (:func:`rerun_containers`): each account's current best on the old version's board that
  is a container (the climb no later climb replaced, as :func:`submissions.ladder.current_best` reads it), run again from the archive it uploaded, as that
  account's submission (it climbs and spends the new split's budget like any release), counted in no quota;
  its ``provenance`` names the row it re-runs.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from leaderboard.models import Dataset
from qval.schema import PUBLIC_SPLITS

from . import lifecycle
from .baselines import BaselineRequest, launch_baseline
from .models import Submission
from .services import SubmissionRejected

log = logging.getLogger(__name__)

RERUN_OF = "rerun_of"
"""The ``provenance`` key naming the submission a re-run repeats on a fresh split."""


def _hidden(dataset: Dataset) -> list[str]:
    return sorted(set(dataset.states.values_list("split", flat=True).distinct()) - set(PUBLIC_SPLITS))


def rerun_baselines(old: Dataset, new: Dataset) -> list[Submission]:
    """Launch on ``new`` each finished baseline run of ``old``'s hidden splits (see the module doc); return them."""
    launched: list[Submission] = []
    have = set(Submission.objects.filter(kind=Submission.KIND_BASELINE, dataset=new).exclude(state=Submission.FAILED)
               .values_list("method_name", "backbone_name", "split", "target", "modality"))
    for sub in Submission.objects.filter(kind=Submission.KIND_BASELINE, dataset=old, split__in=_hidden(old),
                                         state=Submission.FINISHED).order_by("pk"):
        key = (sub.method_name, sub.backbone_name, sub.split, sub.target, sub.modality)
        if key in have:
            continue
        have.add(key)
        try:
            launched.append(launch_baseline(BaselineRequest(
                sub.method_name, sub.backbone_name, new.key, sub.split, sub.target, seed=int(sub.config.get("seed", 0)),
                options=dict(sub.config.get("options") or {}), modality=sub.modality), user=sub.user))
        except SubmissionRejected as exc:
            log.warning("baseline %s (%s) is not re-run on %s: %s", sub.pk, sub.method_name, new.key, exc)
    return launched


def rerun_containers(old: Dataset, new: Dataset) -> list[Submission]:
    """Queue on ``new`` each account's current best container on ``old``'s hidden boards (see the module doc);
    return the new submissions (``received``: their archive is inspected again, then they run)."""
    climbed = Submission.objects.filter(dataset=old, split__in=_hidden(old), source=Submission.SOURCE_USER,
                                        state=Submission.FINISHED, ladder_climbed=True)
    replaced = climbed.exclude(ladder_against=None).values("ladder_against")  # as ladder.current_best reads it
    bests = climbed.exclude(pk__in=replaced).filter(kind=Submission.KIND_CONTAINER).exclude(file="").order_by("pk")
    queued: list[Submission] = []
    with transaction.atomic():
        for best in bests:
            fields = {f: getattr(best, f) for f in (
                "user", "source", "kind", "split", "target", "method_name", "backbone_name", "modality", "public",
                "description", "paper_url", "code_url", "open_weights", "filename", "file_format", "size_bytes",
                "sha256", "rules")}
            sub = Submission.objects.create(dataset=new, file=best.file.name, provenance={RERUN_OF: best.pk},
                                            deadline=timezone.now() + timedelta(seconds=settings.QVAL_RECEIVED_S),
                                            **fields)
            queued.append(sub)
        lifecycle.send_on_commit([sub.pk for sub in queued])
    for sub in queued:
        log.info("container %s re-runs %s on %s", sub.pk, sub.provenance[RERUN_OF], new.key)
    return queued
