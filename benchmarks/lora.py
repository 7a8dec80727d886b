"""Benchmark: amc-value with LoRA on a local backbone, CPU against the GPU, in one run.

The same training path the site runs for ``featuriser=local:PATH`` with ``lora`` on
(:func:`qval.learned.trainers.fit_lora_value`: LoRA adapters of every linear layer of the
backbone trained jointly with the value head, AMC's Eq. 7) on a random-weight Llama-style
checkpoint built here (:func:`qval.backbone.make_tiny_model`, ``--hidden``/``--layers``; no
weights are downloaded), with Monte-Carlo-free targets: the labels of a small FrozenLake
build's train split (its Q label per candidate, V per state).  Each device runs in a process of
its own (``CUDA_VISIBLE_DEVICES=`` hides the GPU from the CPU one), for the same seeded steps.

It prints, per device, seconds per training step and frozen-encoder texts per second, the
loss at the first and last ten steps, and ``gpu/cpu`` speed ratios; it exits non-zero if a
device's loss does not fall or a score is not finite.

Usage::

    python benchmarks/lora.py                           # hidden 256, 4 layers, 20 steps of 16 rows
    python benchmarks/lora.py --hidden 512 --layers 8 --steps 10

The CPU side dominates the run time: a FrozenLake observation is several hundred tokens of
the tiny tokenizer, so at hidden 512 and 8 layers one CPU step of 32 rows took 31 s on the
2-core machine; size the GPU comparison by the CPU's time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def rows_of(dataset_dir: Path) -> list[tuple[str, str, str | None, float]]:
    """(task, observation, action or None, label) rows of the train split: Q per candidate, V per state."""
    from qval import schema

    ds = schema.Dataset.read(dataset_dir)
    rows: list[tuple[str, str, str | None, float]] = []
    for st in ds.states:
        if st.split != "train":
            continue
        rows.append((st.task, st.observation, None, float(ds.v_labels[st.id])))
        rows.extend((st.task, st.observation, c.action, float(ds.q_labels[c.id])) for c in st.candidates)
    return rows


def measure(checkpoint: Path, dataset_dir: Path, steps: int, batch_size: int) -> dict[str, object]:
    """Train on this process's device; time the steps and the frozen encoder."""
    import numpy as np
    import torch

    from qval.learned.lora import BackboneEncoder
    from qval.learned.trainers import fit_lora_value

    rows = rows_of(dataset_dir)
    params = {"steps": steps, "batch_size": batch_size, "lr": 1e-3, "lora_lr": 1e-4, "dropout": 0.0}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    fit_lora_value(rows[:batch_size], checkpoint, dict(params, steps=2), seed=0)  # warm-up (kernels, allocator)
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    _, head, encoder, curve = fit_lora_value(rows, checkpoint, params, seed=0)
    if device == "cuda":
        torch.cuda.synchronize()
    train_s = time.perf_counter() - started
    texts = [r[1] for r in rows][:512]
    frozen = BackboneEncoder(checkpoint)
    with torch.no_grad():
        frozen.encode(texts[:64])
        started = time.perf_counter()
        vectors = frozen.encode(texts, batch_size=64)
        encode_s = time.perf_counter() - started
    return {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "rows": len(rows), "step_s": train_s / steps, "texts_per_s": len(texts) / encode_s,
        "loss_first": float(np.mean(curve[:10])), "loss_last": float(np.mean(curve[-10:])),
        "finite": bool(torch.isfinite(vectors).all()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--child", nargs=2, metavar=("CHECKPOINT", "DATASET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(Path(args.child[0]), Path(args.child[1]), args.steps, args.batch_size)))
        return 0

    import torch

    from qval import build
    from qval.envs import registry
    from qval.backbone import make_tiny_model

    work = Path(tempfile.mkdtemp(prefix="qval-lora-bench-"))
    checkpoint = make_tiny_model(work / "model", hidden_size=args.hidden, num_layers=args.layers)
    env, spec = registry.builder("frozenlake")()
    spec = replace(spec, version="lora-bench", num_trajectories=20, modalities=("text",), end_images=False,
                   secret_test=False)
    build.build_dataset(env, spec).write(work / "data")
    devices = [("cpu", {"CUDA_VISIBLE_DEVICES": ""})]
    if torch.cuda.is_available():
        devices.append(("gpu", {}))
    results = {}
    for name, extra in devices:
        print(f"training on {name} ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, __file__, "--child", str(checkpoint), str(work / "data"),
                              "--steps", str(args.steps), "--batch-size", str(args.batch_size)],
                             env={**os.environ, **extra}, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    size = sum(f.stat().st_size for f in checkpoint.glob("*.safetensors")) / 2**20
    print(f"checkpoint: random Llama, hidden {args.hidden}, {args.layers} layers, {size:.0f} MiB; "
          f"{args.steps} steps of {args.batch_size} rows")
    ok = True
    for name, r in results.items():
        print(f"{name:>4} ({r['device']}): {r['rows']} rows, {r['step_s'] * 1000:.0f} ms/step, "
              f"frozen encoder {r['texts_per_s']:.0f} texts/s, loss {r['loss_first']:.4f} -> {r['loss_last']:.4f}")
        ok &= bool(r["finite"]) and r["loss_last"] < r["loss_first"]
    if "gpu" in results:
        cpu, gpu = results["cpu"], results["gpu"]
        print(f"gpu/cpu: training {cpu['step_s'] / gpu['step_s']:.1f}x, "
              f"frozen encoding {gpu['texts_per_s'] / cpu['texts_per_s']:.1f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
