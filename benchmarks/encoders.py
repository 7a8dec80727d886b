"""Benchmark: image encoders of the embedding / pre-trained methods, batched on GPU vs CPU, in one run.

For each architecture (random weights, :class:`qval.methods.encoders.Encoder`, so preprocessing
included, as the methods run it) and synthetic 512×512 RGB images (FrozenLake renders' size):

* ``cpu batched``: ``--images`` images in batches of ``--batch-size`` on the CPU (the baseline);
* ``cpu single``: ``--single`` images one at a time on the CPU;
* ``cuda batched``: as ``cpu batched`` on the GPU, when one is there (after a warm-up batch).

It prints images/s per row (end to end, and ``model-only``: the same batches already
preprocessed, so the forward pass alone), then the ratios ``gpu/cpu`` (batched GPU over batched CPU) and
``batched/single`` (on CPU).  With ``--lm`` it also times a small random-weight transformers
causal LM (Llama architecture) forward pass over ``--lm-batch`` sequences of ``--lm-tokens``
tokens: batched on CPU, one sequence at a time on CPU, and batched on GPU (tokens/s and ratios).

Usage::

    python benchmarks/encoders.py                                  # tiny ViT + ResNet-50, CPU only here
    python benchmarks/encoders.py --archs ViT-B-32 resnet50 --images 512 --batch-size 64 --lm
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np


def _images(n: int, seed: int = 0) -> list[Any]:
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, size=(512, 512, 3), dtype=np.uint8)) for _ in range(n)]


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time_encoder(arch: str, device: str, images: list[Any], batch_size: int) -> tuple[float, float]:
    """Seconds to embed ``images`` (after one warm-up batch): end to end, and the model alone on
    the already preprocessed batches."""
    import torch

    from qval.methods import encoders

    encoder = encoders.Encoder(encoders.resolve(f"{arch}:random"), seed=0, device=device, batch_size=batch_size)
    encoder.encode_images(images[:batch_size])
    _sync(device)
    start = time.perf_counter()
    encoder.encode_images(images)
    _sync(device)
    total = time.perf_counter() - start
    batches = [torch.stack([encoder.preprocess(im) for im in images[i:i + batch_size]])
               for i in range(0, len(images), batch_size)]
    start = time.perf_counter()
    for batch in batches:
        encoder.embed_tensors(batch)
    _sync(device)
    return total, time.perf_counter() - start


def bench_encoders(archs: list[str], n_images: int, n_single: int, batch_size: int, gpu: bool) -> None:
    images = _images(n_images)
    print(f"{'arch':<16} {'device':<6} {'mode':<8} {'images':>6} {'seconds':>8} {'images/s':>9} {'model-only/s':>12}")
    for arch in archs:
        rates = {}
        runs = [("cpu", "batched", n_images, batch_size), ("cpu", "single", n_single, 1)]
        if gpu:
            runs.append(("cuda", "batched", n_images, batch_size))
        for device, mode, n, bs in runs:
            seconds, model = _time_encoder(arch, device, images[:n], bs)
            rates[(device, mode)] = n / seconds
            rates[(device, mode, "model")] = n / model
            print(f"{arch:<16} {device:<6} {mode:<8} {n:>6} {seconds:>8.3f} {n / seconds:>9.1f} {n / model:>12.1f}",
                  flush=True)
        line = f"{arch}: batched/single on cpu = {rates['cpu', 'batched'] / rates['cpu', 'single']:.2f}x"
        if gpu:
            line += (f", gpu/cpu batched = {rates['cuda', 'batched'] / rates['cpu', 'batched']:.2f}x"
                     f" (model only {rates['cuda', 'batched', 'model'] / rates['cpu', 'batched', 'model']:.2f}x)")
        print(line, flush=True)


def bench_lm(batch: int, tokens: int, gpu: bool) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=4096)
    ids = torch.randint(0, config.vocab_size, (batch, tokens))
    total = batch * tokens
    print(f"\ncausal LM: Llama {config.num_hidden_layers} layers × {config.hidden_size}, random weights, "
          f"{batch} sequences × {tokens} tokens")
    rates = {}
    for device, mode in [("cpu", "batched"), ("cpu", "single")] + ([("cuda", "batched")] if gpu else []):
        model = LlamaForCausalLM(config).to(device).eval()
        dtype_ids = ids.to(device)
        with torch.inference_mode():
            model(dtype_ids[:1])  # warm-up
            _sync(device)
            start = time.perf_counter()
            if mode == "batched":
                model(dtype_ids)
            else:
                for row in dtype_ids:
                    model(row[None])
            _sync(device)
        seconds = time.perf_counter() - start
        rates[(device, mode)] = total / seconds
        print(f"  {device:<6} {mode:<8} {seconds:>8.3f} s {total / seconds:>11.0f} tokens/s", flush=True)
    line = f"  batched/single on cpu = {rates['cpu', 'batched'] / rates['cpu', 'single']:.2f}x"
    if gpu:
        line += f", gpu/cpu batched = {rates['cuda', 'batched'] / rates['cpu', 'batched']:.2f}x"
    print(line)


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=["qval-tiny-vit", "resnet50"],
                        help="open_clip architectures or resnet50 (random weights)")
    parser.add_argument("--images", type=int, default=64, help="images per batched run")
    parser.add_argument("--single", type=int, default=16, help="images for the one-at-a-time CPU run")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lm", action="store_true", help="also time a small random causal LM forward pass")
    parser.add_argument("--lm-batch", type=int, default=16)
    parser.add_argument("--lm-tokens", type=int, default=256)
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"GPU: {torch.cuda.get_device_name(0) if gpu else 'none'}")
    bench_encoders(args.archs, args.images, args.single, args.batch_size, gpu)
    if args.lm:
        bench_lm(args.lm_batch, args.lm_tokens, gpu)


if __name__ == "__main__":
    main()
