"""The networks of the learned family: separate projections of each input field, then an MLP.

:class:`FieldNet` takes one embedding per field (state, action, task — or a subset), projects
each with its own linear layer into a shared space, concatenates them and runs an MLP with
ReLU and Dropout down to one scalar.  Best-of-Q's Q network is ``FieldNet`` over (state,
action, task), its V network over (state, task); QLASS's QNet and the AMC value head use
(state, action, task) too (the AMC head gets a zero action for a state's own value).
"""

from __future__ import annotations

import os
from typing import Sequence

import torch
from torch import nn


def limit_threads() -> None:
    """Use ``QVAL_LEARNED_THREADS`` (default 1) CPU threads: these nets are small, and on a shared,
    busy machine torch's default of one thread per core spends most of its time waiting (20× slower
    measured under load)."""
    torch.set_num_threads(max(1, int(os.environ.get("QVAL_LEARNED_THREADS", "1"))))


class FieldNet(nn.Module):
    """``MLP(concat(Linear_i(x_i)))`` → one scalar per row."""

    def __init__(self, field_dims: Sequence[int], shared: int = 64, hidden: Sequence[int] = (128, 64),
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.projections = nn.ModuleList(nn.Linear(d, shared) for d in field_dims)
        layers: list[nn.Module] = []
        width = shared * len(field_dims)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, *fields: torch.Tensor) -> torch.Tensor:
        if len(fields) != len(self.projections):
            raise ValueError(f"expected {len(self.projections)} fields, got {len(fields)}")
        joint = torch.cat([p(x) for p, x in zip(self.projections, fields)], dim=-1)
        return self.mlp(joint).squeeze(-1)
