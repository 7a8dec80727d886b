"""LoRA on a local transformers backbone: the encoder that ``amc-value`` fine-tunes with its value head.

Agentic Monte Carlo (``../shared/seeds/agentic-monte-carlo-paper.txt`` §4.1, Table 7) initialises its
value model from a pre-trained LLM and fine-tunes, in tandem, a regression head and low-rank
adaptation blocks (rank 8, alpha 16).  This module is that encoder, in plain torch (no ``peft``):

* :class:`LoRALinear` wraps a frozen ``nn.Linear`` ``W`` as ``y = W x + (α / r) · B A x`` with
  ``A`` (``r × in``, Kaiming-uniform from a seeded generator) and ``B`` (``out × r``, zeros), so
  an untrained adapter leaves the backbone exactly as it was.
* :func:`add_lora` puts one on every ``nn.Linear`` of the backbone's body (``AutoModel``: the
  attention q/k/v/o and MLP gate/up/down projections of a Llama-style model; the LM head is not
  loaded) and freezes every base weight.
* :class:`BackboneEncoder`: the checkpoint's tokenizer and body; :meth:`~BackboneEncoder.encode`
  gives the mean-pooled last hidden layer of each text (its tokens, special ones included, at
  most :data:`MAX_TOKENS`) — the same features as :mod:`qval.backbone`'s ``/v1/embeddings`` —
  with gradients into the adapters when asked.

Torch and transformers are imported here; the site never imports this module.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

MAX_TOKENS = 512
"""Texts are cut to their first this many tokens before encoding."""


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update ``(alpha / rank) · B A``."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator) -> None:
        super().__init__()
        if rank < 1:
            raise ValueError(f"the LoRA rank must be at least 1, got {rank}")
        if alpha <= 0:
            raise ValueError(f"the LoRA alpha must be positive, got {alpha}")
        self.base = base
        for param in base.parameters():
            param.requires_grad_(False)
        self.rank, self.alpha, self.scale = rank, float(alpha), float(alpha) / rank
        a = torch.empty(rank, base.in_features)
        bound = 1.0 / math.sqrt(base.in_features)  # kaiming_uniform_(a=√5), as nn.Linear and LoRA's reference code
        a.uniform_(-bound, bound, generator=generator)
        dtype, device = base.weight.dtype, base.weight.device
        self.lora_a = nn.Parameter(a.to(device=device, dtype=dtype))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.T @ self.lora_b.T) * self.scale


def add_lora(model: nn.Module, rank: int, alpha: float, seed: int) -> list[str]:
    """Freeze every parameter of ``model``, wrap each of its ``nn.Linear`` s in a :class:`LoRALinear`
    (adapters drawn from ``seed``, in module order); return the wrapped modules' names."""
    for param in model.parameters():
        param.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    names = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    if not names:
        raise ValueError(f"{type(model).__name__} has no linear projection to adapt")
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(getattr(parent, child), rank, alpha, generator))
    return names


class BackboneEncoder(nn.Module):
    """Tokenizer and body of a local checkpoint; texts → mean-pooled last hidden layer.

    ``lora`` = ``(rank, alpha, seed)`` adds adapters (:func:`add_lora`); without it the encoder is
    the frozen backbone.  The base weights are in eval mode and never trained.
    """

    def __init__(self, path: str | Path, lora: tuple[int, float, int] | None = None,
                 device: str | None = None) -> None:
        super().__init__()
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        self.path = Path(path)
        if not (self.path / "config.json").is_file():
            raise ValueError(f"{self.path} is not a local transformers checkpoint (no config.json)")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()  # the body of a causal LM: its unused lm_head is reported otherwise
        hf_logging.disable_progress_bar()
        try:
            self.body = AutoModel.from_pretrained(self.path, local_files_only=True).to(self.device)
        finally:
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()
        self.body.eval()
        self.dim = int(self.body.config.hidden_size)
        self.adapted = add_lora(self.body, *lora) if lora is not None else []
        if lora is None:
            for param in self.body.parameters():
                param.requires_grad_(False)

    def train(self, mode: bool = True) -> "BackboneEncoder":
        """Keep the backbone in eval mode (no dropout): only the adapters learn."""
        super().train(mode)
        self.body.eval()
        return self

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The adapters' ``lora_a`` / ``lora_b`` tensors by name (what is stored with a trained model)."""
        return {name: param for name, param in self.body.named_parameters() if ".lora_" in name}

    def load_adapters(self, state: dict[str, torch.Tensor]) -> None:
        """Copy stored adapter tensors in; ``ValueError`` when their names or shapes differ."""
        own = self.adapter_state()
        if set(own) != set(state):
            raise ValueError(f"the stored adapters do not fit {self.path}: {len(state)} tensors for "
                             f"{len(own)} adapter tensors")
        with torch.no_grad():
            for name, param in own.items():
                if param.shape != state[name].shape:
                    raise ValueError(f"adapter {name}: stored shape {tuple(state[name].shape)}, "
                                     f"expected {tuple(param.shape)}")
                param.copy_(state[name])

    def _batch(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        eos = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        ids = [list(self.tokenizer(t, add_special_tokens=True)["input_ids"])[:MAX_TOKENS] or [eos] for t in texts]
        width = max(len(i) for i in ids)
        input_ids = torch.tensor([i + [pad] * (width - len(i)) for i in ids], device=self.device)
        mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i in ids], device=self.device)
        return input_ids, mask

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """``(len(texts), dim)`` float32 on the CPU: each text's mean last hidden state over its tokens
        (right-padded batches; causal attention keeps padding out of the real tokens).  Differentiable
        into the adapters when gradients are enabled."""
        if not texts:
            return torch.zeros(0, self.dim)
        parts = []
        for start in range(0, len(texts), batch_size):
            input_ids, mask = self._batch(texts[start:start + batch_size])
            hidden = self.body(input_ids=input_ids, attention_mask=mask).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1)
            parts.append(pooled.float().cpu())
        return torch.cat(parts)
