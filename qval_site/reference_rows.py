"""Reference rows on every hosted dataset: the one seeding step behind ``manage.py seed_reference_rows``
(which ``make up`` runs) and behind a dataset build that finishes (:data:`workers.builds.SEED_TASK`,
:mod:`qval_site.tasks`).

It lives here, above every app it calls (README, *Imports are meant to run one way*), and queues on the
newest version of each hosted dataset (or of the datasets named), each part idempotent and run by the
platform's workers:

* the baseline runs of the reference methods that need no model (on the ``scoring`` queue: seconds each, so
  they do not wait behind the training runs), test split, targets Q and V, on the board of each modality the
  dataset offers (they score the state, not its text or image: FrozenLake's image boards get them too;
  :func:`submissions.baselines.queue_reference_rows`);
* one training run of each learned method with the default featuriser and parameters, where the dataset
  has a train split; a finished one publishes its dev and test scores (:func:`learning.services.queue_reference_runs`)
  on the text boards only, since the learned methods read the text observations;
* the Best-of-N runs of the built-in pickers in the environments the track plays, when the test-split
  secret is set (:func:`best_of_n.services.queue_reference_runs`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from best_of_n import services as best_of_n
from best_of_n.models import BestOfNRun
from leaderboard.models import Dataset
from learning import services as learning
from learning.models import TrainingRun
from submissions.baselines import queue_reference_rows
from submissions.models import Submission

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Seeded:
    """What one seeding queued (empty lists: everything was there already)."""

    baselines: list[Submission]
    training_runs: list[TrainingRun]
    best_of_n_runs: list[BestOfNRun]

    @property
    def count(self) -> int:
        """How many runs were queued in all."""
        return len(self.baselines) + len(self.training_runs) + len(self.best_of_n_runs)


def seed_reference_rows(datasets: Iterable[Dataset] | None = None) -> Seeded:
    """Queue every reference run missing on ``datasets`` (default: the newest version of each hosted dataset;
    a dataset that is not hosted is left out); see the module docstring.  Calling it again queues nothing new,
    and a run that failed is queued again."""
    chosen = [ds for ds in (Dataset.newest_hosted() if datasets is None else datasets) if ds.hosted]
    seeded = Seeded(baselines=queue_reference_rows(chosen), training_runs=learning.queue_reference_runs(chosen),
                    best_of_n_runs=best_of_n.queue_reference_runs(chosen))
    log.info("reference rows on %s: %d run(s) queued", ", ".join(ds.key for ds in chosen) or "no dataset", seeded.count)
    return seeded
