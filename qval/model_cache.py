"""GGUF checkpoints converted once per machine to transformers checkpoints.

``transformers`` reads a GGUF file by parsing its metadata three times (config, tokenizer, weights)
and de-quantising every tensor to float32: about half a minute of CPU for SmolLM2-135M on this
project's 2-core machines, in every process that loads it (each Celery worker, each test worker,
the stand-in vLLM server).  :func:`converted` does it once per file digest and saves the result
(config, tokenizer, float32 safetensors) under :func:`cache_root`; later loads read that folder in
seconds.  The folder records the digest of the GGUF file it came from and of its weights, and a
folder whose weights do not match is converted again.  Django-free.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

from qval.smollm2 import file_sha256

CACHE_ENV = "QVAL_MODEL_CACHE"
"""The environment variable naming the cache folder (default ``~/.cache/qval/models``)."""
RECORD = "converted-from.json"
"""The file a finished conversion writes last: the GGUF file's name and digest, each weights file's digest."""


def cache_root() -> Path:
    """Where converted checkpoints live: ``$QVAL_MODEL_CACHE`` or ``~/.cache/qval/models``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "qval" / "models")


def converted(folder: Path, gguf_file: str, sha256: str) -> Path:
    """The transformers checkpoint folder of the GGUF file ``folder/gguf_file``, whose SHA-256 digest is
    ``sha256`` (checked by the caller): converted now unless a process of this machine did it before (one
    process converts while the others wait for it)."""
    target = cache_root() / f"gguf-{sha256.lower()}"
    if _complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(target):
            _convert(folder, gguf_file, sha256.lower(), target)
    return target


def _complete(target: Path) -> bool:
    """Whether ``target`` holds a whole conversion whose weights are the ones it recorded."""
    try:
        weights = json.loads((target / RECORD).read_text())["weights_sha256"]
        return bool(weights) and all(file_sha256(target / name) == digest for name, digest in weights.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _convert(folder: Path, gguf_file: str, sha256: str, target: Path) -> None:
    """Load the GGUF file as ``transformers`` does (float32) and save it to ``target`` whole: written beside it,
    then renamed, so that a reader never sees half a checkpoint."""
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    partial = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        load = {"local_files_only": True, "gguf_file": gguf_file}
        AutoTokenizer.from_pretrained(folder, **load).save_pretrained(partial)
        model = AutoModelForCausalLM.from_pretrained(folder, **load, dtype=torch.float32)
        # transformers will not save a model it read from GGUF (save_pretrained refuses a quantised origin); its
        # weights are plain float32 tensors by now, so they are saved as they are, with the config minus the
        # quantisation it no longer has
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.save_pretrained(partial)
        model.generation_config.save_pretrained(partial)
        save_model(model, str(partial / "model.safetensors"))  # tied weights stored once
        weights = {path.name: file_sha256(path) for path in sorted(partial.glob("*.safetensors"))}
        record = {"gguf_file": gguf_file, "gguf_sha256": sha256, "weights_sha256": weights}
        (partial / RECORD).write_text(json.dumps(record, indent=1) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
