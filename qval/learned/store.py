"""Trained models of the learned family: scoring, content hash, storage.

A :class:`TrainedModel` holds its networks (:class:`~qval.learned.nets.FieldNet`), how they
were built, the training settings, what data was used and the loss curves.  Its
:attr:`~TrainedModel.version` is the SHA-256 of all of that (tensors' bytes included), so the
same seed and data give the same version.  :func:`save` writes
``{root}/{method}/{dataset slug}-{version}/{model hash[:16]}/`` with ``model.json`` and
``weights.pt``; :func:`load` reads it back and checks the hash.

A model whose backbone was fine-tuned (``amc-value`` with ``lora``) also holds its
:class:`~qval.learned.lora.BackboneEncoder`: :attr:`~TrainedModel.backbone` records the
checkpoint (path, :func:`~qval.learned.features.checkpoint_digest`, LoRA rank and alpha, the
adapted projections), the adapter tensors are stored in ``weights.pt`` (key ``lora``) and enter
the version; :func:`load` rebuilds the encoder from the same checkpoint (refused when its digest
changed) and scoring encodes texts through it instead of the frozen feature cache.

Scoring (:meth:`TrainedModel.q`, :meth:`TrainedModel.v`) takes :class:`Point` s — text task,
state and action — and a :class:`~qval.learned.features.FeatureCache` of the featuriser it was
trained with.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from qval.learned.data import Point
from qval.learned.features import FeatureCache, checkpoint_digest
from qval.learned.lora import BackboneEncoder
from qval.learned.nets import FieldNet, limit_threads


@dataclass
class TrainedModel:
    """One trained method on one dataset."""

    method: str
    dataset: str
    """``slug@version`` of the dataset trained on."""
    fingerprint: str
    featuriser: str
    seed: int
    params: dict[str, Any]
    net_config: dict[str, dict[str, Any]]
    """Net name → ``FieldNet`` keyword arguments (``field_dims``, ``shared``, ``hidden``, ``dropout``)."""
    nets: dict[str, FieldNet]
    data: dict[str, Any]
    """What the training used: splits, counts of trajectories, transitions, trees, rollouts."""
    losses: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0
    backbone: dict[str, Any] | None = None
    """The fine-tuned checkpoint: ``path``, ``digest``, ``lora_rank``, ``lora_alpha``, ``adapted`` (None: frozen features)."""
    encoder: BackboneEncoder | None = None
    """The backbone with the trained adapters (when :attr:`backbone` is set)."""

    # -- scoring -------------------------------------------------------------------------
    def _encode(self, feats: FeatureCache, points: Sequence[Point], with_action: bool) -> list[torch.Tensor]:
        limit_threads()
        if feats.featuriser.name != self.featuriser:
            raise ValueError(f"this model was trained on {self.featuriser} features, not {feats.featuriser.name}")
        encode = self._through_encoder if self.encoder is not None else feats.encode
        pairs = None  # pairs first: a featuriser that runs each state as its pairs' prefix encodes the state there
        if with_action and len(self.nets["q"].projections) == 4:  # a featuriser with pair features (crossed, tabular)
            pairs = torch.from_numpy(feats.encode_pairs([p.state for p in points], [p.action or "" for p in points]))
        state = encode([p.state for p in points])
        task = encode([p.task for p in points])
        if not with_action:
            return [torch.from_numpy(state), torch.from_numpy(task)]
        if any(p.action is None for p in points):
            raise ValueError("Q scoring needs an action in every point")
        action = encode([p.action or "" for p in points])
        fields = [torch.from_numpy(state), torch.from_numpy(action), torch.from_numpy(task)]
        return fields + ([pairs] if pairs is not None else [])

    def _through_encoder(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` from the fine-tuned backbone (each distinct text encoded once)."""
        assert self.encoder is not None
        unique = list(dict.fromkeys(texts))
        self.encoder.eval()
        vectors = self.encoder.encode(unique).numpy()
        row = {t: i for i, t in enumerate(unique)}
        return vectors[[row[t] for t in texts]] if texts else vectors

    @torch.no_grad()
    def q(self, points: Sequence[Point], feats: FeatureCache) -> np.ndarray:
        """Q(s, a) of each point."""
        if not points:
            return np.zeros(0)
        net = self.nets["q"]
        net.eval()
        return net(*self._encode(feats, points, True)).double().numpy()

    @torch.no_grad()
    def v(self, points: Sequence[Point], candidates: Sequence[Sequence[str]], feats: FeatureCache) -> np.ndarray:
        """V(s) of each point (its action is ignored); ``candidates[i]``: the actions state ``i`` offers.

        Best-of-Q: its V network.  QLASS: the best Q over the candidates.  AMC: the value head
        with a zero action (its target was the return of continuations from the state itself).
        """
        if not points:
            return np.zeros(0)
        if "v" in self.nets:
            net = self.nets["v"]
            net.eval()
            return net(*self._encode(feats, points, False)).double().numpy()
        if self.method == "amc-value":
            s, t = self._encode(feats, points, False)
            net = self.nets["q"]
            net.eval()
            none = [torch.zeros(len(points), proj.in_features) for proj in net.projections[3:]]  # no pair either
            return net(s, torch.zeros(len(points), net.projections[1].in_features), t, *none).double().numpy()
        flat = [Point(p.task, p.state, a) for p, acts in zip(points, candidates) for a in acts]
        if any(not acts for acts in candidates):
            raise ValueError("every state needs at least one candidate action for V = max Q")
        q = self.q(flat, feats)
        out, i = [], 0
        for acts in candidates:
            out.append(float(q[i:i + len(acts)].max()))
            i += len(acts)
        return np.asarray(out)

    # -- identity ------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Everything but the weights, JSON-serialisable (``backbone`` only for a fine-tuned one)."""
        out = {"method": self.method, "dataset": self.dataset, "fingerprint": self.fingerprint,
               "featuriser": self.featuriser, "seed": self.seed, "params": self.params,
               "net_config": self.net_config, "data": self.data, "losses": self.losses,
               "seconds": round(self.seconds, 3)}
        if self.backbone is not None:
            out["backbone"] = self.backbone
        return out

    def tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """What ``weights.pt`` holds: each net's state dict and, for a fine-tuned backbone, ``lora``: its adapters."""
        out = {name: net.state_dict() for name, net in self.nets.items()}
        if self.encoder is not None:
            out["lora"] = self.encoder.adapter_state()
        return out

    @property
    def version(self) -> str:
        """SHA-256 of the description (timing left out) and of every trained tensor (nets, adapters)."""
        h = hashlib.sha256()
        desc = self.describe()
        desc.pop("seconds")
        h.update(json.dumps(desc, sort_keys=True, separators=(",", ":")).encode())
        tensors = self.tensors()
        for name in sorted(tensors):
            for key, tensor in sorted(tensors[name].items()):
                h.update(f"{name}.{key}".encode())
                h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()


def model_dir(root: str | Path, model: TrainedModel) -> Path:
    """Where :func:`save` puts ``model``."""
    slug = model.dataset.replace("@", "-")
    return Path(root) / model.method / slug / model.version[:16]


def save(model: TrainedModel, root: str | Path) -> Path:
    """Write ``model`` under ``root`` (idempotent: the same version goes to the same folder); return the folder."""
    folder = model_dir(root, model)
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save({name: {k: t.detach().cpu() for k, t in state.items()} for name, state in model.tensors().items()}, buf)
    tmp = folder / "weights.pt.tmp"
    tmp.write_bytes(buf.getvalue())
    tmp.replace(folder / "weights.pt")
    meta = model.describe() | {"version": model.version}
    tmp = folder / "model.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
    tmp.replace(folder / "model.json")
    return folder


def load(folder: str | Path) -> TrainedModel:
    """Read a model written by :func:`save`; ``ValueError`` when its weights do not match its version."""
    folder = Path(folder)
    meta = json.loads((folder / "model.json").read_text())
    states = torch.load(folder / "weights.pt", map_location="cpu", weights_only=True)
    nets = {}
    for name, cfg in meta["net_config"].items():
        net = FieldNet(**cfg)
        net.load_state_dict(states[name])
        net.eval()
        nets[name] = net
    backbone, encoder = meta.get("backbone"), None
    if backbone is not None:
        if checkpoint_digest(backbone["path"]) != backbone["digest"]:
            raise ValueError(f"{folder}: the backbone checkpoint {backbone['path']} is not the one the adapters "
                             f"were trained on (digest {backbone['digest'][:12]})")
        encoder = BackboneEncoder(backbone["path"], lora=(backbone["lora_rank"], backbone["lora_alpha"], meta["seed"]))
        encoder.load_adapters(states["lora"])
        encoder.eval()
    model = TrainedModel(method=meta["method"], dataset=meta["dataset"], fingerprint=meta["fingerprint"],
                         featuriser=meta["featuriser"], seed=meta["seed"], params=meta["params"],
                         net_config=meta["net_config"], nets=nets, data=meta["data"], losses=meta["losses"],
                         seconds=meta["seconds"], backbone=backbone, encoder=encoder)
    if model.version != meta["version"]:
        raise ValueError(f"{folder}: the stored weights do not match the model's version {meta['version'][:16]}")
    return model
