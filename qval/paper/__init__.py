"""Published results: every paper whose results the site imports, behind one interface (:mod:`.base`).

Each module of this package that defines ``RESULTS`` (a :class:`~.base.PublishedResults`) is a paper, and so is
each folder whose ``importer`` module defines it; they are found on first use (:func:`papers`).  A second paper's
results are one new module.  Today: QVal v1.0
(:mod:`.qval_v1`).  Nothing here knows about Django.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from qval import scoring

from .base import PublishedDataError, PublishedResults


@functools.cache
def papers() -> dict[str, PublishedResults]:
    """Paper key (``qval-v1.0``) -> its results, for every paper module of this package."""
    found: dict[str, PublishedResults] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name == "base":
            continue
        module = f"{__name__}.{info.name}" + (".importer" if info.ispkg else "")
        results = getattr(importlib.import_module(module), "RESULTS", None)
        if not isinstance(results, PublishedResults):
            raise TypeError(f"{module} defines no RESULTS (a PublishedResults)")
        if results.key in found:
            raise ValueError(f"two papers have the key {results.key!r}")
        found[results.key] = results
    return found


def for_dataset(slug: str) -> tuple[PublishedResults, str] | None:
    """The paper whose dataset ``slug`` is, with the environment slug it is of; ``None`` for one of ours."""
    for results in papers().values():
        for environment in results.environments().values():
            if results.dataset_slug(environment.slug) == slug:
                return results, environment.slug
    return None


def publishing(environment: str) -> PublishedResults:
    """The one paper with an environment of the paper's name ``environment``; ``KeyError`` when none or several."""
    found = [results for results in papers().values() if environment in results.environments()]
    if len(found) != 1:
        raise KeyError(f"{len(found)} papers publish an environment named {environment!r}")
    return found[0]



def truth(dataset: str, target: str) -> scoring.Truth:
    """The labels for ``target`` of the paper's dataset of slug ``dataset`` (one the site does not host, whose
    rows the import wrote); :class:`~.base.PublishedDataError` when no paper has that dataset or publishes no such
    labels."""
    found = for_dataset(dataset)
    if found is None:
        raise PublishedDataError(f"no paper publishes a dataset {dataset!r}")
    results, environment = found
    return results.truth(environment, target)
