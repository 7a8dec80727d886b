"""Cost of every text method on SmolLM2-135M-Instruct, per scored pair, extrapolated to the hosted test splits.

For each dataset (``--dataset DIR``, repeatable: a dataset folder as the site keeps it; default: FrozenLake built
here into a temporary folder with a random test-split secret) it draws ``--states`` states of the test split
(seeded), and for each text method that needs a chat model (``needs`` ``chat-llm`` or ``chat-llm-logprobs``) runs
it as the reference rows do (target ``q``, the method's own parameters, the response cache in a fresh folder)
against SmolLM2 served by our own server (:class:`qval.backbone.BackboneServer` on a Unix socket, in this
process), then runs it again on the same cache. It prints, per method and dataset:

* ``pairs``: the state-action pairs of the sample, ``ids``: the ids the method scored (a pointwise method scores
  the actor's pair of each state, a ranking method every pair);
* ``cpu s/pair``: process CPU seconds (server and client threads together) per pair of the sample (``wall
  s/pair`` with ``--clock wall``, for a GPU, whose process mostly waits on the device), and
  ``tokens/pair``: model tokens (prompt + completion) per pair, cache hits excluded (both times ``scale``);
* ``rerun``: the second run's time over the first's, and its tokens (0: every answer came from the cache);
* ``full h``: the first run's seconds per state times the test split's states, in hours -- but for the code
  family (``codegen``, ``codegen-avg``, ``eureka``), whose model calls are made once per run (the functions are
  generated once, then run on every point in the sandbox, outside this process), the first run's seconds as
  they are.

``--option METHOD:KEY=VALUE`` runs a method with fewer ``samples`` or ``iterations`` than its own (the code family's
16 functions of up to 1,024 tokens each, ``eureka``'s 16 rounds of 8, take hours of CPU on SmolLM2); its cost is then
scaled by default/used for each (``scale``): model calls grow linearly in both.

and the total per dataset: the CPU hours a fresh site needs to fill that dataset's Q text board with every text
method on one core (the gpu worker runs one job at a time), or with ``--clock wall`` on a GPU its hours there.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/smollm2_cost.py [--states 2] [--dataset DIR ...]
    python3 benchmarks/smollm2_cost.py --clock wall --torch-threads 4 ...   # on a GPU machine
"""

from __future__ import annotations

import argparse
import math
import os
import random
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qval import build, schema, smollm2  # noqa: E402
from qval.backbone import BackboneServer, backend_from_spec  # noqa: E402
from qval.envs import registry  # noqa: E402
from qval.methods.registry import chat_methods, get_method  # noqa: E402
from qval.methods.run import Progress, run_method  # noqa: E402

PER_RUN = frozenset({"codegen", "codegen-avg", "eureka"})
"""Methods whose model calls do not grow with the states scored (module docstring)."""
SCALED = ("samples", "iterations")


def sample(ds: schema.Dataset, states: int, seed: int) -> tuple[schema.Dataset, int]:
    """``states`` test states of ``ds`` drawn with ``seed`` (a dataset of those alone) and the test split's size."""
    test = ds.states_in("test")
    if not test:
        raise SystemExit(f"{ds.manifest.key} has no test split here (built without the secret?)")
    chosen = sorted(random.Random(seed).sample(test, min(states, len(test))), key=lambda s: test.index(s))
    return schema.Dataset(manifest=ds.manifest, states=chosen, q_labels=ds.q_labels, v_labels=ds.v_labels), len(test)


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
"""``--clock``: process CPU seconds (a CPU worker's cost) or wall seconds (a GPU's: its CPU time only waits)."""


def measure(method: str, ds: schema.Dataset, backbone: str, cache: Path,
            options: dict[str, Any], clock: str) -> tuple[float, int, int]:
    """Seconds on ``clock``, model tokens and ids scored of one run of ``method`` on ``ds``'s test split."""
    tokens = [0]

    def progress(p: Progress) -> None:
        tokens[0] = p.tokens

    start = CLOCKS[clock]()
    out = run_method(method, ds, "test", "q", backbone, cache_dir=cache, progress=progress, options=options)
    return CLOCKS[clock]() - start, tokens[0], len(out.scores)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--states", type=int, default=2, help="test states sampled per dataset (default 2)")
    parser.add_argument("--dataset", action="append", default=[], type=Path, help="a dataset folder (repeatable)")
    parser.add_argument("--methods", default="", help="comma-separated (default: every text method)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--option", action="append", default=[], metavar="METHOD:KEY=VALUE",
                        help="a method option (integer), e.g. eureka:iterations=1; samples/iterations are scaled")
    parser.add_argument("--torch-threads", default="1",
                        help="torch intra-op threads, or 'auto': the cores the machine's other processes leave idle "
                        "(qval.cpu_share, as the site's gpu worker; default 1: CPU seconds of one core)")
    parser.add_argument("--batch", type=int, default=None,
                        help="requests each method sends at once and the server decodes together (default: the "
                        "methods' and the server's own, 32)")
    parser.add_argument("--prefixes", type=int, default=None,
                        help="prompt blocks the server keeps (default: SmolLM2's entry, qval.smollm2.PREFIXES)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="what a run costs: process CPU seconds (default) or wall seconds (on a GPU)")
    args = parser.parse_args(argv)
    import torch

    if args.torch_threads != "auto":
        torch.set_num_threads(int(args.torch_threads))
    methods = [m for m in args.methods.split(",") if m] or chat_methods()
    options: dict[str, dict[str, Any]] = {}
    for text in args.option:
        method, _, assignment = text.partition(":")
        key, _, value = assignment.partition("=")
        if not (method and key and value.isdigit()):
            raise SystemExit(f"--option {text!r}: expected METHOD:KEY=INTEGER")
        options.setdefault(method, {})[key] = int(value)
    secret = os.environ.get("QVAL_TEST_SPLIT_SECRET") or secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="qval-smol-cost-") as tmp:
        work = Path(tmp)
        if args.dataset:
            datasets = [schema.Dataset.read(d, secret=secret) for d in args.dataset]
        else:
            datasets = [build.build(registry.builder("frozenlake"), work / "frozenlake", secret=secret)]
        started = time.perf_counter()
        spec = smollm2.backbone_spec() | {"threads": args.torch_threads}
        spec |= {"max_batch": args.batch} if args.batch else {}
        spec |= {"prefixes": args.prefixes} if args.prefixes is not None else {}
        backend = backend_from_spec(smollm2.BACKBONE_NAME, spec)
        print(f"SmolLM2 loaded in {time.perf_counter() - started:.1f} s on {backend.device}; torch threads "
              f"{args.torch_threads}; {os.cpu_count()} CPUs; clock {args.clock}; batch "
              f"{backend.batcher.max_batch}; prompt blocks kept {backend.prefixes.size}", flush=True)
        socket_path = work / "llm.sock"
        totals: dict[str, float] = {}
        print(f"| dataset | method | pairs | ids | {args.clock} s/pair | tokens/pair | rerun ratio | rerun tokens | scale | "
              "test states | full h |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
        with BackboneServer(backend, budget=2**62, socket_path=socket_path):
            for ds in datasets:
                part, test_states = sample(ds, args.states, args.seed)
                pairs = sum(len(s.candidates) for s in part.states)
                for method in methods:
                    cache = work / "cache" / ds.manifest.key / method
                    used = options.get(method, {})
                    sent = used | ({"concurrency": args.batch} if args.batch else {})
                    params = get_method(method).params
                    scale = math.prod(params[k] / used[k] for k in SCALED if k in used and k in params)
                    spent, tokens, ids = measure(method, part, f"unix:{socket_path}", cache, sent, args.clock)
                    spent2, tokens2, _ = measure(method, part, f"unix:{socket_path}", cache, sent, args.clock)
                    per_run = spent * scale
                    full_h = (per_run if method in PER_RUN else per_run / len(part.states) * test_states) / 3600
                    totals[ds.manifest.key] = totals.get(ds.manifest.key, 0.0) + full_h
                    print(f"| {ds.manifest.key} | {method} | {pairs} | {ids} | {spent * scale / pairs:.2f} | "
                          f"{tokens * scale / pairs:.0f} | {spent2 / spent:.4f} | {tokens2} | {scale:g} | {test_states} | "
                          f"{full_h:.2f} |", flush=True)
        for key, hours in totals.items():
            print(f"{key}: {hours:.2f} {args.clock} hours for every text method's Q row on its test split")
        print(f"all: {sum(totals.values()):.2f} {args.clock} hours; wall {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
