"""One decoding step of a batch: transformers' concatenating cache against ours allocated once (qval.decode_cache).

For each batch size, the same random prompts are read once and then decoded greedily for ``--steps`` tokens twice:
with the ``DynamicCache`` the prompt pass returns (every step concatenates, so copies, the whole cache) and with
:func:`qval.decode_cache.decode_cache`.  Prints the CPU milliseconds of a step and of a sequence a step, the ratio of
each row's sequence a step to the first batch size's with the concatenating cache (the baseline, measured in the
same run), and whether the two caches gave identical logits.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/decode_step.py [--batches 1,8,16,32] [--prompt 600] [--steps 40]
    [--backbone smollm2-135m|DIR]   (default: SmolLM2-135M-Instruct, the default backbone)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from qval import smollm2  # noqa: E402
from qval.backbone import TransformersBackend, backend_from_spec  # noqa: E402
from qval.decode_cache import decode_cache  # noqa: E402


def decode(model: torch.nn.Module, prompts: torch.Tensor, steps: int, allocated_once: bool) -> tuple[float, torch.Tensor]:
    """CPU seconds of one step (mean of ``steps``) and the logits of every step."""
    batch, length = prompts.shape
    with torch.no_grad():
        out = model(prompts, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        if allocated_once:
            cache = decode_cache([[(layer.keys[row:row + 1], layer.values[row:row + 1]) for layer in cache.layers]
                                  for row in range(batch)], length + steps)
        token, position, logits = out.logits[:, -1:].argmax(-1), torch.full((batch, 1), length), []
        started = time.process_time()
        for _ in range(steps):
            out = model(token, position_ids=position, past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1])
            token, position = out.logits[:, -1:].argmax(-1), position + 1
        return (time.process_time() - started) / steps, torch.stack(logits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,8,16,32", help="comma-separated batch sizes")
    parser.add_argument("--prompt", type=int, default=600, help="prompt tokens (SmolLM2's FrozenLake prompts: ~600)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--backbone", default="smollm2-135m", help="smollm2-135m or a checkpoint directory")
    parser.add_argument("--torch-threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    backend = (backend_from_spec(args.backbone, smollm2.backbone_spec()) if args.backbone == "smollm2-135m"
               else TransformersBackend(args.backbone))
    model = backend.model  # type: ignore[attr-defined]
    generator = torch.Generator().manual_seed(0)
    print(f"{args.backbone}, prompts of {args.prompt} tokens, {args.steps} greedy steps, "
          f"torch threads {args.torch_threads}")
    print("| batch | cache | ms a step | ms a sequence a step | ratio to the first row, a sequence | same logits |")
    print("|---:|---|---:|---:|---:|---|")
    base = None
    for size in (int(b) for b in args.batches.split(",")):
        prompts = torch.randint(3, model.config.vocab_size, (size, args.prompt), generator=generator)
        concatenating, logits = decode(model, prompts, args.steps, allocated_once=False)
        once, logits_once = decode(model, prompts, args.steps, allocated_once=True)
        base = base or concatenating / size
        same = "yes" if torch.equal(logits, logits_once) else f"no (max diff {(logits - logits_once).abs().max():.2e})"
        for label, seconds in (("concatenating", concatenating), ("allocated once", once)):
            print(f"| {size} | {label} | {seconds * 1000:.1f} | {seconds * 1000 / size:.1f} | "
                  f"{seconds / size / base:.2f} | {same} |")


if __name__ == "__main__":
    main()
