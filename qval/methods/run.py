"""Run a built-in method on a dataset split and write what the site accepts.

:func:`run_method` is what ``qval predict`` and a site job call.  It resumes: every model
response is cached under ``cache_dir`` (see :mod:`qval.methods.llm`), so calling it again after
a stop -- or after a worker restart -- sends only the requests not answered yet.  Failures of
single points are NaN in the output, never an exception.  Django-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from qval import schema
from qval.methods.registry import MethodContext, MethodError, MethodOutput, get_method


@dataclass(frozen=True)
class Progress:
    """Where a run is: ``done`` of ``total`` units (points, states or batches, as the method counts them) and the
    model tokens sent so far (cache hits cost none)."""

    done: int
    total: int
    tokens: int = 0


def shared_cache_dir(data_dir: str | Path) -> Path:
    """The response cache every baseline run under the data folder ``data_dir`` shares (a site's, a remote
    worker's).  One for every method: a response's key is the model's identity and the whole request, so a
    method that sends another's requests (``codegen-avg`` after ``codegen``) is answered from the cache."""
    return Path(data_dir) / "cache" / "baselines"


def run_method(name: str, dataset: schema.Dataset, split: str, target: str, backbone: str, *, seed: int = 0,
               cache_dir: str | Path | None = None, options: dict[str, Any] | None = None,
               dataset_dir: str | Path | None = None,
               progress: Callable[[Progress], None] | None = None) -> MethodOutput:
    """Run method ``name`` on ``split`` of ``dataset`` for ``target`` (``q`` or ``v``) with ``backbone``.

    Ranking methods run as target ``q`` (they score every candidate).  Raises
    :class:`MethodError` for a run that cannot make sense (unknown method, unsupported target,
    empty split, hidden labels a method needs).
    """
    spec = get_method(name)
    if target not in schema.TARGETS:
        raise MethodError(f"unknown target {target!r}; expected one of {', '.join(schema.TARGETS)}")
    if not spec.supports(target):
        raise MethodError(f"{name} scores {', '.join(spec.targets)}, not target {target!r}")
    states = dataset.states_in(split)
    if not states:
        raise MethodError(f"dataset {dataset.manifest.key} has no states in split {split!r}")

    def report(done: int, total: int) -> None:
        if progress is not None:
            progress(Progress(done, total, int(getattr(ctx.meter, "tokens", 0))))

    ctx = MethodContext(dataset=dataset, split=split, target=target, points=states, backbone=backbone,
                        dataset_dir=Path(dataset_dir) if dataset_dir else None, seed=seed, progress=report,
                        cache_dir=Path(cache_dir) if cache_dir else None, options=dict(options or {}))
    output = spec.run(ctx)
    output.meta.setdefault("method", spec.name)
    output.meta.setdefault("method_version", spec.version)
    output.meta.update(dataset=dataset.manifest.key, fingerprint=dataset.manifest.fingerprint, split=split,
                       target=target, num_points=len(output.scores), num_nan=output.num_nan)
    return output


def write_predictions(output: MethodOutput, path: str | Path) -> Path:
    """Write ``output`` as a predictions file the site accepts (Parquet, or CSV/JSON Lines by suffix).

    With per-sample scores (``output.samples``) the file has a ``sample`` column: one row per
    id and sample; otherwise one row per id.  NaN scores are written as missing.
    """
    path = Path(path)
    if output.samples:
        ids = [i for i, values in output.samples.items() for _ in values]
        scores = [v for values in output.samples.values() for v in values]
        samples: list[int] | None = [k for values in output.samples.values() for k in range(len(values))]
    else:
        ids, scores, samples = list(output.scores), list(output.scores.values()), None
    clean = [None if s is None or not math.isfinite(s) else float(s) for s in scores]
    columns: dict[str, Any] = {"id": pa.array(ids, pa.string()), "score": pa.array(clean, pa.float64())}
    if samples is not None:
        columns["sample"] = pa.array(samples, pa.int64())
    table = pa.table(columns)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        import pyarrow.csv as pa_csv

        pa_csv.write_csv(table, path)
    elif path.suffix in (".jsonl", ".ndjson"):
        table.to_pandas().to_json(path, orient="records", lines=True)
    else:
        pq.write_table(table, path)
    return path
