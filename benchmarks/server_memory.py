"""Peak memory of the CPU model server serving ``direct-16``, with and without giving freed heap back after each batch.

The model server's batches run on whichever request thread leads them, and glibc keeps what each thread's arena
freed (:mod:`qval.heap`).  This runs, in fresh processes one after the other, ``direct-16`` (``--samples`` of its
16 samples) on ``--states`` test states of FrozenLake, built here with a random test-split secret, against SmolLM2
served by our own server in the process, as ``benchmarks/smollm2_cost.py`` does: with ``trim_heap`` off (the
baseline), on (:func:`qval.heap.trim` after each batch, as the server runs), and off with glibc held to one arena
(``MALLOC_ARENA_MAX=1``: what running every batch on one thread would give).  Prints each process's peak resident
memory (``VmHWM``), its resident memory after loading the model and at the end, its CPU seconds and minor page
faults, a digest of its scores (all must be equal: the setting changes memory, not answers), and the ratios of the
two others to the baseline.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/server_memory.py [--states 8] [--samples 16]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qval import build, smollm2  # noqa: E402
from qval.backbone import BackboneServer, backend_from_spec  # noqa: E402
from qval.envs import registry  # noqa: E402
from qval.methods.run import run_method  # noqa: E402
from smollm2_cost import sample  # noqa: E402  (beside this file)

SETTINGS = {"keep": (False, {}), "trim": (True, {}), "one-arena": (False, {"MALLOC_ARENA_MAX": "1"})}
"""Each child's ``trim_heap`` and environment: the baseline (off), as the server runs (on), and off with glibc
held to one arena for every thread (what running every batch on one thread would give, for comparison)."""


def status_kib(field: str) -> int:
    """A field of ``/proc/self/status`` in KiB (``VmHWM``: peak resident memory, ``VmRSS``: resident now)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def child(setting: str, states: int, samples: int, secret: str) -> dict[str, object]:
    """One process's run of direct-16 (module docstring): its memory, CPU seconds and scores' digest."""
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="qval-server-memory-") as tmp:
        work = Path(tmp)
        ds = build.build(registry.builder("frozenlake"), work / "frozenlake", secret=secret)
        part, _ = sample(ds, states, seed=0)
        backend = backend_from_spec(smollm2.BACKBONE_NAME, smollm2.backbone_spec() | {"threads": 1})
        backend.trim_heap = SETTINGS[setting][0]
        loaded = status_kib("VmRSS")
        socket_path = work / "llm.sock"
        started = time.process_time()
        with BackboneServer(backend, budget=2**62, socket_path=socket_path):
            out = run_method("direct-16", part, "test", "q", f"unix:{socket_path}", cache_dir=work / "cache",
                             options={"samples": samples})
        spent = time.process_time() - started
    digest = hashlib.sha256(json.dumps(sorted(out.scores.items()), default=repr).encode()).hexdigest()[:16]
    return {"setting": setting, "peak_gib": status_kib("VmHWM") / 2**20, "end_gib": status_kib("VmRSS") / 2**20,
            "loaded_gib": loaded / 2**20, "cpu_s": spent, "requests": len(part.states) * samples, "scores": digest,
            "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--states", type=int, default=8, help="FrozenLake test states (default 8)")
    parser.add_argument("--samples", type=int, default=16, help="direct-16's samples per state (default 16)")
    parser.add_argument("--child", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    parser.add_argument("--secret", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.states, args.samples, args.secret)))
        return 0
    secret = os.environ.get("QVAL_TEST_SPLIT_SECRET") or secrets.token_hex(16)
    rows = {}
    for setting, (_, env) in SETTINGS.items():  # the baseline first, each in a fresh process, one after the other
        done = subprocess.run([sys.executable, __file__, "--child", setting, "--states", str(args.states),
                               "--samples", str(args.samples), "--secret", secret],
                              check=True, capture_output=True, text=True, env=os.environ | env)
        rows[setting] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"direct-16 on SmolLM2, {args.states} FrozenLake test states x {args.samples} samples "
          f"({rows['trim']['requests']} requests), one process each, {os.cpu_count()} CPUs")
    print("| setting | peak GiB | end GiB | after load GiB | cpu s | minor faults | scores |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for setting, row in rows.items():
        print(f"| {setting} | {row['peak_gib']:.2f} | {row['end_gib']:.2f} | {row['loaded_gib']:.2f} | "
              f"{row['cpu_s']:.0f} | {row['minor_faults']:,} | {row['scores']} |")
    off = rows["keep"]
    for setting in ("trim", "one-arena"):
        row = rows[setting]
        print(f"{setting} / keep: peak {row['peak_gib'] / off['peak_gib']:.2f}, growth after load "
              f"{(row['peak_gib'] - row['loaded_gib']) / (off['peak_gib'] - off['loaded_gib']):.2f}, cpu "
              f"{row['cpu_s'] / off['cpu_s']:.2f}; same scores: {row['scores'] == off['scores']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
