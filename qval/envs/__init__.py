"""Environments: the adapter interface (:mod:`.base`), one folder per environment, and the registry that
finds them (:mod:`.registry`).

A folder ``qval/envs/<name>/`` holds everything about one environment: its adapter (``adapter.py``), its
dataset versions as specs (``datasets.py``), its method context per prompt version (``prompts/<version>.json``)
and, in ``__init__.py``, its :class:`~.entry.EnvironmentEntry` (catalogue entry, open book, builders, Best-of-N).
"""
