"""The importer interface of published results: what a paper's module gives the site to import.

A paper publishes results on datasets we do not host.  Its module (``qval/paper/<name>.py``, or a folder when it
has more to say, as :mod:`qval.paper.qval_v1`) defines ``RESULTS``, a :class:`PublishedResults`, and says:

* its **environments** (:meth:`PublishedResults.environments`): the paper's name of each, the slug of our
  environment its results go to, and what its (not hosted) dataset offers;
* its **rows** (:meth:`PublishedResults.batches`): every result to import as an :class:`ImportedRow` (method,
  backbone, target, modality, metric rows, provenance, a stable import key), in :class:`Batch` es the importer
  skips when their data did not change since the last import;
* its **labels** (:meth:`PublishedResults.truth`), where it publishes them, so that its rows' predictions are
  compared as our submissions are.

The importer (``submissions/importing.py``) writes each environment's dataset ``<key>-<environment slug>`` and
the rows; the site's loading reads the labels of such a dataset from its paper (:func:`qval.paper.for_dataset`).
Nothing here knows about Django.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from qval import scoring


class PublishedDataError(ValueError):
    """A published-results data file that does not have the expected shape (says where)."""


@dataclass(frozen=True)
class PublishedEnvironment:
    """One environment of a paper."""

    name: str
    """The paper's name of it (``FrozenLake``)."""
    slug: str
    """The slug of the site's environment its results go to (``frozenlake``; one we do not host is created)."""
    description: str
    """What the site says of it when it has no environment of that slug yet."""
    modalities: tuple[str, ...]
    """The modalities of the paper's dataset of it."""


@dataclass(frozen=True)
class ImportedRow:
    """One result of a paper, imported as one submission with its metric rows."""

    key: str
    """Stable identity: importing again updates the submission of this key."""
    environment: str
    """The paper's name of its environment (a key of :meth:`PublishedResults.environments`)."""
    method: str
    backbone: str
    target: str
    modality: str
    source: str
    """``reported`` (a number the authors give) or ``rescored`` (scored here from their stored predictions)."""
    provenance: Mapping[str, Any]
    """Where it comes from; it must name a ``file`` (the submission's file name)."""
    results: tuple[Mapping[str, Any], ...]
    """Its metric rows: ``metric``, ``value``, ``p_value``, ``num_points``, ``num_dropped``, ``coverage``,
    ``insufficient``, ``details``."""
    predictions: bytes | None = None
    """Its per-point predictions as a JSON Lines predictions file, kept on the row (``rescored`` rows)."""


@dataclass(frozen=True)
class Batch:
    """Rows imported together: skipped when every one of :attr:`keys` was imported from data of :attr:`digest`."""

    source: str
    keys: tuple[str, ...]
    digest: str
    """Changes whenever the data (or how its rows are made) changes; recorded in each row's provenance."""
    rows: Callable[[], Iterable[ImportedRow]] = field(repr=False)
    """Makes the rows (called only when the batch is not skipped: re-scoring costs time)."""


class PublishedResults(ABC):
    """A paper's results, as the importer and the site's loading read them (module docstring)."""

    key: str
    """Short name (``qval-v1.0``): its datasets' slugs start with it."""
    title: str
    """How its datasets are named (``QVal-v1.0``)."""
    dataset_version: str
    """The version of its datasets (``1.0``)."""
    rules: str
    """The scoring rules its numbers follow (:data:`qval.metrics.RULES`)."""
    dataset_description: str
    """The description of each of its datasets."""

    @abstractmethod
    def environments(self) -> dict[str, PublishedEnvironment]:
        """Its environments by the paper's name, in the paper's order."""

    @abstractmethod
    def dataset_provenance(self) -> dict[str, Any]:
        """Where its datasets come from (a dataset row's ``manifest.provenance``)."""

    @abstractmethod
    def batches(self, resamples: int) -> Iterable[Batch]:
        """Every row to import (``resamples``: bootstrap resamples of what is scored here)."""

    @abstractmethod
    def truth(self, environment: str, target: str) -> scoring.Truth:
        """The labels of environment slug ``environment`` for ``target``; :class:`PublishedDataError` where the
        paper publishes none."""

    def dataset_slug(self, environment: str) -> str:
        """The slug of its dataset of environment slug ``environment``."""
        return f"{self.key}-{environment}"
