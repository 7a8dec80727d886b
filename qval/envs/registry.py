"""The one registry of environments: every folder of ``qval/envs/`` that declares an ``ENVIRONMENT``
(:class:`~qval.envs.entry.EnvironmentEntry`), found when this module is imported.

Everything that needs to know which environments exist reads it: the dataset builds (:data:`BUILDERS`,
:data:`VERSIONS`, :func:`builder_for`), the site's catalogue (:func:`catalogue`), the Best-of-N track
(:func:`best_of_n`) and the methods (:func:`environment`'s prompt context and environment-only methods).
Adding an environment is adding a folder; :func:`load_folder` registers one from anywhere (a folder outside the
package, a test's temporary folder).  Django-free.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from typing import Any

from qval import build
from qval.envs.base import Environment
from qval.envs.entry import EnvironmentEntry

ENVIRONMENTS: dict[str, EnvironmentEntry] = {}
"""Environment name -> its entry."""
BUILDERS: dict[str, build.Builder] = {}
"""Builder name -> what it builds now (``manage.py build_dataset <name>``)."""
VERSIONS: dict[str, build.Builder] = {}
"""Every dataset version a builder makes (``slug@version`` -> builder), the superseded ones included: what a
loaded dataset's environment is looked up by (:func:`builder_for`)."""


class UnknownEnvironment(KeyError):
    """A name the registry does not hold (the message lists those it does)."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(entry: EnvironmentEntry) -> EnvironmentEntry:
    """Add ``entry``; a name, builder or dataset version another environment has already is an error."""
    if entry.name in ENVIRONMENTS:
        raise ValueError(f"environment {entry.name!r} is registered twice ({ENVIRONMENTS[entry.name].folder}, "
                         f"{entry.folder})")
    taken = [b for b in entry.builders if b in BUILDERS] + [v.key for v in entry.versions if v.key in VERSIONS]
    if taken:
        raise ValueError(f"environment {entry.name!r}: {', '.join(taken)} already registered by another environment")
    ENVIRONMENTS[entry.name] = entry
    BUILDERS.update(entry.builders)
    VERSIONS.update({v.key: v for v in entry.versions})
    return entry


def _entry_of(module: Any) -> EnvironmentEntry:
    entry = getattr(module, "ENVIRONMENT", None)
    if not isinstance(entry, EnvironmentEntry):
        raise TypeError(f"{module.__name__} ({module.__file__}) defines no ENVIRONMENT (an EnvironmentEntry)")
    return entry


def load_folder(folder: str | Path) -> EnvironmentEntry:
    """Import the environment folder ``folder`` as the package named after it and register its ``ENVIRONMENT``
    (its adapter is then ``<folder name>.adapter``)."""
    folder = Path(folder).resolve()
    init = folder / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(f"{folder} is no environment folder: it has no __init__.py")
    name = folder.name
    if name in sys.modules:
        raise ValueError(f"a module named {name!r} is imported already: rename the folder {folder}")
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        return register(_entry_of(module))
    except BaseException:
        del sys.modules[name]
        raise


def _discover() -> None:
    """Register every environment folder of this package (its subpackages), in name order."""
    package = importlib.import_module(__package__ or "qval.envs")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.ispkg:
            register(_entry_of(importlib.import_module(f"{package.__name__}.{info.name}")))


def environment(name: str) -> EnvironmentEntry:
    """The entry of environment ``name`` (a manifest's ``environment``); :class:`UnknownEnvironment` if none."""
    try:
        return ENVIRONMENTS[name]
    except KeyError:
        raise UnknownEnvironment(f"unknown environment {name!r}; registered: {', '.join(ENVIRONMENTS)}") from None


def builder(name: str) -> build.Builder:
    """What builder ``name`` builds; :class:`UnknownEnvironment` (``unknown dataset …``) if there is no such builder."""
    try:
        return BUILDERS[name]
    except KeyError:
        raise UnknownEnvironment(f"unknown dataset {name!r}; choose one of {', '.join(BUILDERS)}") from None


def builder_for(key: str) -> build.Builder | None:
    """The builder of dataset ``slug@version`` (:data:`VERSIONS`, a fresh hidden split's included), or ``None``."""
    slug, _, version = key.partition("@")
    base, refresh = build.split_version(version)
    make = VERSIONS.get(f"{slug}@{base}")
    if make is None or refresh == 0:
        return make

    def make_refreshed() -> tuple[Environment, build.DatasetSpec]:
        env, spec = make()
        return env, build.refreshed(spec, refresh)

    return make_refreshed


def builder_name(key: str) -> str | None:
    """The name in :data:`BUILDERS` that builds dataset ``slug@version``'s base version now (``None`` for a
    superseded or unknown version): the one a fresh hidden split of it is built with."""
    slug, _, version = key.partition("@")
    base = f"{slug}@{build.split_version(version)[0]}"
    return next((name for name, make in BUILDERS.items() if VERSIONS.get(base) is make), None)


def catalogue(name: str) -> dict[str, Any]:
    """The site's environment row of ``name`` (:meth:`EnvironmentEntry.catalogue`); an environment the registry
    does not hold (a published paper's) is shown by its name alone."""
    entry = ENVIRONMENTS.get(name)
    return entry.catalogue() if entry is not None else {"name": name}


def best_of_n() -> dict[str, str]:
    """The builders whose environments the Best-of-N track plays -> their datasets' slugs."""
    out = {}
    for entry in ENVIRONMENTS.values():
        if entry.best_of_n is not None:
            out[entry.best_of_n] = entry.builders[entry.best_of_n].spec.slug
    return out


def methods_only_for(name: str) -> tuple[str, ...]:
    """The built-in methods that apply to environment ``name`` only (none for an unregistered one)."""
    entry = ENVIRONMENTS.get(name)
    return entry.methods if entry is not None else ()


def environment_only_methods() -> frozenset[str]:
    """Every built-in method that some environment declares its own (:attr:`EnvironmentEntry.methods`)."""
    return frozenset(m for entry in ENVIRONMENTS.values() for m in entry.methods)


_discover()
