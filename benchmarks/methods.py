"""Throughput of the built-in LLM methods' client: concurrent vs one request at a time, and the cache.

Runs ``direct-single`` on the FrozenLake dev split (the first ``--points`` states) three times
against the same server:

1. one request at a time (``concurrency=1``), empty cache;
2. ``--concurrency`` requests at once, another empty cache;
3. the run of (2) again: every response from the cache.

and prints points/s of each with the ratios (2)/(1) and (3)/(2).  The server is a local
checkpoint served by our transformers-backed server (``--backbone DIR``; default: a tiny
random-weight model built here) or any OpenAI-compatible server (``--backbone http://...``,
e.g. ``vllm serve``, which batches concurrent requests; ours serialises them, so there the
ratio shows the client's overlap of request handling with generation rather than a batching gain).

    .venv/bin/python benchmarks/methods.py [--points 24] [--concurrency 8] [--backbone DIR|URL]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qval import build, schema  # noqa: E402
from qval.envs import registry  # noqa: E402
from qval.backbone import BackboneServer, TransformersBackend, make_tiny_model  # noqa: E402
from qval.methods.run import run_method  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--backbone", help="checkpoint directory or http(s):// URL (default: a tiny model built here)")
    parser.add_argument("--dataset", help="a FrozenLake dataset directory (default: built here)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads of the local server (default 1: on a busy CPU, OpenMP threads "
                             "make a long-lived serving thread many times slower than a fresh one, which would "
                             "show up as a false concurrency gain)")
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    with tempfile.TemporaryDirectory(prefix="qval-bench-") as tmp:
        work = Path(tmp)
        backbone = args.backbone or str(make_tiny_model(work / "tiny"))
        ds = schema.Dataset.read(args.dataset) if args.dataset else build.build(registry.builder("frozenlake"), work / "frozenlake")
        ds = schema.Dataset(manifest=ds.manifest, states=ds.states_in("dev")[: args.points], q_labels=ds.q_labels,
                            v_labels=ds.v_labels)
        options = {"max_tokens": args.max_tokens}
        with contextlib.ExitStack() as stack:
            if not backbone.startswith(("http://", "https://")):  # serve the checkpoint once for every run
                server = stack.enter_context(BackboneServer(TransformersBackend(backbone), budget=2**62,
                                                            socket_path=work / "llm.sock"))
                backbone = f"unix:{server.socket_path}"

            def timed(concurrency: int, cache: Path) -> tuple[float, int]:
                start = time.perf_counter()
                out = run_method("direct-single", ds, "dev", "q", backbone, cache_dir=cache,
                                 options={**options, "concurrency": concurrency})
                return len(out.scores) / (time.perf_counter() - start), int(out.meta["cache_hits"])

            timed(1, work / "warm")  # warms the model up (not counted)
            serial, _ = timed(1, work / "serial")
            concurrent, _ = timed(args.concurrency, work / "concurrent")
            cached, hits = timed(args.concurrency, work / "concurrent")
    print(f"direct-single on {len(ds.states)} FrozenLake dev points, backbone {backbone}")
    print(f"  one request at a time     {serial:8.2f} points/s")
    print(f"  {args.concurrency:2d} requests at once      {concurrent:8.2f} points/s   ratio {concurrent / serial:.2f}x")
    print(f"  rerun from the cache      {cached:8.2f} points/s   speed-up {cached / concurrent:.1f}x ({hits} hits)")


if __name__ == "__main__":
    main()
