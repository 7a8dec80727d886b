"""Frozen image and image–text encoders for the embedding and pre-trained methods, from local files only.

**Backbone specs.**  The ``backbone`` of an encoder method is one of

* a *named encoder* — ``clip``, ``siglip``, ``liv`` or ``vip`` — whose checkpoint file is the
  setting ``QVAL_ENCODER_<NAME>`` (e.g. ``QVAL_ENCODER_CLIP=/models/clip-vit-l-14.pt``), with the
  architecture in ``QVAL_ENCODER_<NAME>_MODEL`` (defaults in :data:`NAMED_ENCODERS`) and, for an
  architecture whose text tower uses a Hugging Face tokenizer (SigLIP), a local tokenizer folder
  in ``QVAL_ENCODER_<NAME>_TOKENIZER``;
* ``ARCH:PATH`` — an architecture and a checkpoint file, e.g. ``ViT-B-32:/models/b32.pt`` or
  ``resnet50:/models/vip.pt``;
* ``ARCH:random`` — the architecture with random weights drawn from the run's seed (tests,
  benchmarks).

``ARCH`` is an open_clip model name (its own configs plus the tiny ones in ``encoder_configs/``:
``qval-tiny-vit`` and ``qval-tiny-rn``) or ``resnet50`` (torchvision; the VIP image encoder, a
ResNet-50 whose classifier is replaced by a 1024-dimensional linear head).  Nothing is ever
downloaded: a missing setting or file is an :class:`EncoderError` naming what to set.

**Checkpoints.**  A ``torch.save`` file (read with ``weights_only=True``) holding a state dict,
possibly under ``state_dict``/``model``/``liv``/``vip``, possibly with the key prefixes of the
LIV and VIP releases (``module.``, ``model.``, ``convnet.``), which are stripped; the weights
must then match the architecture exactly.

**Running.**  Images are embedded in batches (``batch_size``) on ``cuda`` when available (or the
device named by ``QVAL_ENCODER_DEVICE``), in eval mode and without gradients, each batch
preprocessed by a few threads; embeddings come back as float64 NumPy arrays, unnormalised.  On CPU a seed gives the same numbers every run.

torch, torchvision and open_clip are imported inside functions, so listing methods stays cheap.
"""

from __future__ import annotations

import hashlib
import io
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from PIL import Image

CONFIG_DIR = Path(__file__).with_name("encoder_configs")
"""open_clip model configs of our own (tiny random-weight towers for tests and CPU runs)."""

NAMED_ENCODERS: dict[str, str] = {"clip": "ViT-L-14", "siglip": "ViT-B-16-SigLIP", "liv": "RN50", "vip": "resnet50"}
"""Named encoders and their default architectures (the paper's: CLIP ViT-L/14, SigLIP-base, LIV's
CLIP-RN50 and VIP's ResNet-50); ``QVAL_ENCODER_<NAME>_MODEL`` overrides the architecture."""

RESNET_ARCHES = ("resnet50",)
VIP_EMBED_DIM = 1024
"""Width of VIP's linear head on the ResNet-50 features."""

DEFAULT_BATCH_SIZE = 32
PREPROCESS_THREADS = min(8, os.cpu_count() or 1)
"""Threads that decode/resize a batch's images (PIL releases the GIL while resizing)."""
_PREFIXES = ("module.", "model.", "convnet.")
_CONTAINERS = ("state_dict", "model", "liv", "vip")


class EncoderError(ValueError):
    """An encoder backbone that cannot be resolved or loaded (unknown architecture, missing file...)."""


@dataclass(frozen=True)
class EncoderSpec:
    """A resolved encoder backbone: architecture, checkpoint file (None: random) and tokenizer folder."""

    arch: str
    checkpoint: Path | None
    tokenizer: Path | None = None
    name: str = ""
    """The named encoder it came from (``clip``...), or empty for an explicit spec."""

    @property
    def kind(self) -> str:
        """``"resnet"`` (image only) or ``"open_clip"`` (image and text towers)."""
        return "resnet" if self.arch in RESNET_ARCHES else "open_clip"

    def describe(self) -> dict[str, Any]:
        """JSON-ready description for a run's config: architecture, checkpoint path and SHA-256."""
        return {
            "encoder": self.name or None, "arch": self.arch,
            "checkpoint": str(self.checkpoint) if self.checkpoint else "random",
            "checkpoint_sha256": _sha256(self.checkpoint) if self.checkpoint else None,
        }


def resolve(backbone: str, env: Mapping[str, str] | None = None) -> EncoderSpec:
    """Turn a backbone spec (see the module docstring) into an :class:`EncoderSpec`.

    Raises :class:`EncoderError` for an unknown architecture, an unset setting or a missing file.
    """
    env = os.environ if env is None else env
    backbone = (backbone or "").strip()
    if backbone in NAMED_ENCODERS:
        key = f"QVAL_ENCODER_{backbone.upper()}"
        arch = env.get(f"{key}_MODEL") or NAMED_ENCODERS[backbone]
        path = env.get(key)
        if not path:
            raise EncoderError(
                f"encoder {backbone!r} has no checkpoint: set {key} to a local {arch} checkpoint file "
                f"(weights are never downloaded)")
        tokenizer = env.get(f"{key}_TOKENIZER")
        return _checked(EncoderSpec(arch=arch, checkpoint=Path(path), name=backbone,
                                    tokenizer=Path(tokenizer) if tokenizer else None), source=key)
    arch, sep, where = backbone.rpartition(":")
    if not sep or not arch or not where:
        raise EncoderError(
            f"encoder backbone {backbone!r}: expected one of {', '.join(NAMED_ENCODERS)}, ARCH:PATH or ARCH:random")
    return _checked(EncoderSpec(arch=arch, checkpoint=None if where == "random" else Path(where)), source=backbone)


def has_real_weights(backbone: str) -> bool:
    """Whether an encoder backbone spec names real weights: a named encoder or ``ARCH:PATH``, not ``ARCH:random``.

    Read from the spec alone (nothing is resolved or opened), so it also sorts the backbones of past runs."""
    backbone = (backbone or "").strip()
    return bool(backbone) and not backbone.endswith(":random")


def _checked(spec: EncoderSpec, source: str) -> EncoderSpec:
    if spec.kind == "open_clip":
        config = _open_clip_config(spec.arch)
        if config.get("text_cfg", {}).get("hf_tokenizer_name") and spec.tokenizer is None:
            hint = f"set {source}_TOKENIZER" if spec.name else "use a named encoder with QVAL_ENCODER_<NAME>_TOKENIZER"
            raise EncoderError(f"encoder {spec.arch}: its text tower needs a Hugging Face tokenizer folder; {hint}")
    for what, path in (("checkpoint", spec.checkpoint), ("tokenizer", spec.tokenizer)):
        if path is not None and not path.exists():
            raise EncoderError(f"encoder {spec.arch}: {what} {path} (from {source}) does not exist")
    return spec


def _open_clip_config(arch: str) -> dict[str, Any]:
    import open_clip

    if CONFIG_DIR not in [Path(p) for p in getattr(open_clip.factory, "_MODEL_CONFIG_PATHS", [])]:
        open_clip.add_model_config(CONFIG_DIR)
    config = open_clip.get_model_config(arch)
    if config is None:
        raise EncoderError(
            f"unknown encoder architecture {arch!r}; expected resnet50 or an open_clip model "
            f"(e.g. ViT-B-32, ViT-L-14, RN50, ViT-B-16-SigLIP, qval-tiny-vit, qval-tiny-rn)")
    return config


def default_device() -> str:
    """``QVAL_ENCODER_DEVICE`` when set, else ``cuda`` when available, else ``cpu``."""
    import torch

    return os.environ.get("QVAL_ENCODER_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")


class Encoder:
    """A loaded frozen encoder: :meth:`encode_images` always, :meth:`encode_texts` for open_clip towers."""

    def __init__(self, spec: EncoderSpec, *, seed: int = 0, device: str | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        import torch

        if batch_size < 1:
            raise EncoderError(f"batch_size must be at least 1, got {batch_size}")
        self.spec, self.device, self.batch_size = spec, device or default_device(), batch_size
        with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
            torch.manual_seed(seed)  # random-weight architectures: the same weights for the same seed
            if spec.kind == "resnet":
                self.model, self.preprocess, self.tokenizer = _resnet(spec), _resnet_preprocess(), None
            else:
                self.model, self.preprocess, self.tokenizer = _open_clip(spec)
        self.model = self.model.to(self.device).eval()

    @property
    def has_text(self) -> bool:
        """Whether the encoder has a text tower."""
        return self.tokenizer is not None

    def encode_images(self, images: Sequence["Image.Image"]) -> np.ndarray:
        """Embeddings of ``images`` (RGB PIL images), shape ``(n, dim)``, in batches."""
        import torch

        pil_stage, tensor_stage = _split_preprocess(self.preprocess)
        normalize = _plain_normalize(tensor_stage)
        out = []
        with ThreadPoolExecutor(PREPROCESS_THREADS) as pool:
            for start in range(0, len(images), self.batch_size):
                # PIL resizes outside the GIL, so threads keep a GPU fed; the tensor steps stay in
                # this thread (torch ops in fresh threads would each start their own CPU thread team)
                resized = list(pool.map(lambda im: pil_stage(im.convert("RGB")), images[start:start + self.batch_size]))
                if normalize is None:
                    out.append(self.embed_tensors(torch.stack([tensor_stage(im) for im in resized])))
                    continue
                # ToTensor + Normalize on the whole batch, on the device: the same arithmetic, far fewer ops
                pixels = torch.from_numpy(np.stack([np.asarray(im, dtype=np.uint8) for im in resized]))
                pixels = pixels.to(self.device).permute(0, 3, 1, 2).float().div_(255)
                mean, std = (torch.tensor(v, device=self.device).view(1, -1, 1, 1) for v in normalize)
                out.append(self.embed_tensors((pixels - mean) / std))
        return np.concatenate(out) if out else np.zeros((0, 0))

    def embed_tensors(self, batch: Any) -> np.ndarray:
        """Embeddings of an already preprocessed batch tensor ``(n, 3, H, W)``."""
        import torch

        with torch.inference_mode():
            batch = batch.to(self.device, non_blocking=True)
            features = self.model(batch) if self.spec.kind == "resnet" else self.model.encode_image(batch)
            return features.float().cpu().numpy().astype(np.float64)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of ``texts``, shape ``(n, dim)``; :class:`EncoderError` for an image-only encoder."""
        import torch

        if self.tokenizer is None:
            raise EncoderError(f"encoder {self.spec.arch} is image-only: it cannot embed the goal text")
        with torch.inference_mode():
            tokens = self.tokenizer(list(texts)).to(self.device)
            return self.model.encode_text(tokens).float().cpu().numpy().astype(np.float64)


def load_image(data: bytes) -> "Image.Image":
    """A PNG/JPEG's bytes as an RGB PIL image (fully read, so a broken file fails here)."""
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image.convert("RGB")


def _open_clip(spec: EncoderSpec) -> tuple[Any, Any, Any]:
    import open_clip

    config = _open_clip_config(spec.arch)
    model, _, preprocess = open_clip.create_model_and_transforms(
        spec.arch, pretrained=None, pretrained_image=False, pretrained_text=False)
    if spec.checkpoint is not None:
        _load_weights(model, spec.checkpoint)
    if spec.tokenizer is not None:
        from open_clip.tokenizer import HFTokenizer

        context = config.get("text_cfg", {}).get("context_length", 77)
        tokenizer = HFTokenizer(str(spec.tokenizer), context_length=context)
    else:
        tokenizer = open_clip.get_tokenizer(spec.arch)
    return model, preprocess, tokenizer


def _split_preprocess(preprocess: Any) -> tuple[Any, Any]:
    """A torchvision ``Compose`` split into its PIL steps and its steps from ``ToTensor`` on."""
    from torchvision import transforms

    steps = list(getattr(preprocess, "transforms", [preprocess]))
    cut = next((i for i, step in enumerate(steps) if isinstance(step, transforms.ToTensor)), 0)
    return transforms.Compose(steps[:cut]), transforms.Compose(steps[cut:])


def _plain_normalize(tensor_stage: Any) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """(mean, std) when the tensor steps are exactly ToTensor then Normalize (done batched), else None."""
    from torchvision import transforms

    steps = tensor_stage.transforms
    if len(steps) == 2 and isinstance(steps[0], transforms.ToTensor) and isinstance(steps[1], transforms.Normalize):
        return tuple(map(float, steps[1].mean)), tuple(map(float, steps[1].std))
    return None


def _resnet(spec: EncoderSpec) -> Any:
    import torch
    import torchvision

    model = torchvision.models.resnet50(weights=None)
    model.fc = torch.nn.Linear(model.fc.in_features, VIP_EMBED_DIM)
    if spec.checkpoint is not None:
        _load_weights(model, spec.checkpoint)
    return model


def _resnet_preprocess() -> Any:
    from torchvision import transforms

    return transforms.Compose([
        transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
        transforms.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
    ])


def _load_weights(model: Any, path: Path) -> None:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise EncoderError(f"checkpoint {path}: cannot be read as a torch state dict ({exc})") from exc
    for key in _CONTAINERS:
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    if not isinstance(state, dict):
        raise EncoderError(f"checkpoint {path}: expected a state dict, found {type(state).__name__}")
    clean = {}
    for key, value in state.items():
        while key.startswith(_PREFIXES):
            key = key[next(len(p) for p in _PREFIXES if key.startswith(p)):]
        clean[key] = value
    try:
        model.load_state_dict(clean, strict=True)
    except RuntimeError as exc:
        raise EncoderError(f"checkpoint {path} does not fit the architecture: {str(exc)[:500]}") from exc


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
