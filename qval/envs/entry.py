"""What an environment folder declares: its catalogue entry and its dataset versions, as data.

An environment is one folder (``qval/envs/<name>/``, or any folder given to
:func:`qval.envs.registry.load_folder`) whose ``__init__.py`` defines ``ENVIRONMENT``, an
:class:`EnvironmentEntry`:

* the **catalogue entry** the site shows (title, description, link) and whether the environment is
  **open book** (its labels follow from its observations, so no split of it is hidden);
* its **dataset versions** (:class:`DatasetVersion`: a :class:`~qval.build.DatasetSpec` and the options its
  adapter is made with), superseded ones included, so that every published version rebuilds bit for bit;
* its **builders**: the names ``manage.py build_dataset`` takes, each the version it builds now;
* the builder whose environment the **Best-of-N** track plays, if any;
* the built-in methods that apply to this environment **only** (a method that reads its observations'
  layout, such as FrozenLake's ``goal-distance``);
* its **method context**, one file per prompt version: ``prompts/<version>.json`` in the folder
  (:meth:`EnvironmentEntry.prompt_context`, read by :mod:`qval.methods.context`).

The adapter (``adapter.py`` in the folder) is imported only when an environment is made
(:meth:`DatasetVersion.environment`): reading the registry costs no browser, simulator or sandbox.
Django-free.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from qval.build import DatasetSpec
from qval.envs.base import Environment


@dataclass(frozen=True, eq=False)
class DatasetVersion:
    """One version of a dataset: its spec and the environment it is built in (``adapter(**options)``).

    Calling it gives ``(environment, spec)``, what :func:`qval.build.build` builds (a
    :data:`qval.build.Builder`)."""

    spec: DatasetSpec
    adapter: str
    """``module:Class`` of the adapter (``qval.envs.<name>.adapter:<Class>``), imported when an environment is made."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The adapter's keyword arguments (JSON-like values: numbers, strings, lists, tuples)."""

    def __post_init__(self) -> None:
        module, _, name = self.adapter.partition(":")
        if not module or not name:
            raise ValueError(f"{self.key}: adapter must be 'module:Class', got {self.adapter!r}")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    @property
    def key(self) -> str:
        """``slug@version``."""
        return f"{self.spec.slug}@{self.spec.version}"

    def environment(self) -> Environment:
        """A new environment of this version (imports the adapter)."""
        module, _, name = self.adapter.partition(":")
        return getattr(importlib.import_module(module), name)(**self.options)

    def derive(self, **changes: Any) -> DatasetVersion:
        """The same environment with ``changes`` to the spec (a later version that keeps the earlier's data)."""
        return replace(self, spec=replace(self.spec, **changes))

    def __call__(self) -> tuple[Environment, DatasetSpec]:
        return self.environment(), self.spec


@dataclass(frozen=True)
class EnvironmentEntry:
    """Everything the project knows about one environment (module docstring)."""

    name: str
    """The adapter's :attr:`~qval.envs.base.Environment.name`: a dataset manifest's ``environment`` and the
    site's environment slug."""
    title: str
    description: str
    url: str
    folder: Path
    """The environment's folder (``Path(__file__).parent`` in its ``__init__.py``)."""
    versions: tuple[DatasetVersion, ...]
    builders: Mapping[str, DatasetVersion]
    """Builder name -> the version it builds now (each one of :attr:`versions`)."""
    open_book: bool = False
    """Its labels follow from its observations (a FrozenLake observation is the whole map): no split of it is
    hidden, and its test boards rank only platform-run rows."""
    best_of_n: str | None = None
    """The builder (one of :attr:`builders`) whose environment the Best-of-N track plays; ``None``: not played."""
    methods: tuple[str, ...] = ()
    """Built-in methods that apply to this environment only."""
    method_cpu_seconds: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Chat-model methods' CPU seconds once per run and per state, measured on this environment's prompts
    (SmolLM2-135M on one core, ``benchmarks/smollm2_cost.py``): the relative work the status page weighs their
    waiting runs by (:func:`submissions.queue_order.cpu_seconds`; a method not measured here takes FrozenLake's)."""

    def __post_init__(self) -> None:
        keys = [v.key for v in self.versions]
        if len(set(keys)) != len(keys):
            raise ValueError(f"environment {self.name!r}: a dataset version is listed twice in {keys}")
        for builder, version in self.builders.items():
            if version not in self.versions:
                raise ValueError(f"environment {self.name!r}: builder {builder!r} builds {version.key}, "
                                 "which is not one of its versions")
        if self.best_of_n is not None and self.best_of_n not in self.builders:
            raise ValueError(f"environment {self.name!r}: Best-of-N plays {self.best_of_n!r}, not one of its "
                             f"builders ({', '.join(self.builders)})")
        object.__setattr__(self, "builders", MappingProxyType(dict(self.builders)))
        object.__setattr__(self, "method_cpu_seconds", MappingProxyType(dict(self.method_cpu_seconds)))

    def catalogue(self) -> dict[str, Any]:
        """The site's environment row: ``name`` (the title), ``description``, ``url`` and ``open_book``."""
        return {"name": self.title, "description": self.description, "url": self.url, "open_book": self.open_book}

    def prompt_context(self, prompt_version: str) -> Path:
        """The method context file of prompt version ``prompt_version`` (it may not exist)."""
        return self.folder / "prompts" / f"{prompt_version}.json"
