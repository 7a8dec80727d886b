"""A key/value cache for decoding that is allocated once, not copied at every token.

``transformers``' ``DynamicCache`` appends a decoded token's keys and values by concatenation: every step copies the
whole cache of every layer.  For a batch of 16 sequences of 600 tokens on SmolLM2 that is about 440 MB copied a step,
as much memory traffic as reading the weights.  :func:`decode_cache` builds a cache whose layers hold buffers long
enough for the prompts and every token still to come; a step writes its token into them and attends over a view of
the filled part.  The view holds the same numbers in the same shape as the concatenated tensor would, so attention
computes the same floats (measured on SmolLM2: identical logits, one sequence and batches of 8 to 32).

Django-free; imports ``torch`` and ``transformers`` (used by :mod:`qval.backbone`'s model server only).
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers.cache_utils import Cache, DynamicLayer

KeysValues = tuple[torch.Tensor, torch.Tensor]


class DecodeLayer(DynamicLayer):
    """One layer of a batch: keys and values in buffers of ``capacity`` positions, the prompts left-padded with
    zeros to the longest; ``keys``/``values`` are views of the filled part."""

    def __init__(self, prompts: Sequence[KeysValues], capacity: int) -> None:
        super().__init__()
        width = max(keys.shape[-2] for keys, _ in prompts)
        if capacity < width:
            raise ValueError(f"capacity {capacity} is shorter than the {width} prompt positions")
        first_keys, first_values = prompts[0]
        _, heads, _, dim = first_keys.shape
        self.dtype, self.device, self.is_initialized = first_keys.dtype, first_keys.device, True
        # zeros, not empty: a padded position's weight is 0 after the mask, and 0 * NaN would still be NaN
        self._keys = first_keys.new_zeros((len(prompts), heads, capacity, dim))
        self._values = first_values.new_zeros((len(prompts), heads, capacity, first_values.shape[-1]))
        for row, (keys, values) in enumerate(prompts):
            self._keys[row, :, width - keys.shape[-2]:width] = keys[0]
            self._values[row, :, width - values.shape[-2]:width] = values[0]
        self._length = width
        self._expose()

    def _expose(self) -> None:
        self.keys, self.values = self._keys[:, :, :self._length], self._values[:, :, :self._length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> KeysValues:
        """Write the new positions after the filled part; return the filled part, new ones included."""
        end = self._length + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            raise ValueError(f"the decode cache holds {self._keys.shape[-2]} positions; {end} were asked for")
        self._keys[:, :, self._length:end] = key_states
        self._values[:, :, self._length:end] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the sequences at ``indices`` (a finished sequence leaves the batch)."""
        self._keys, self._values = self._keys[indices], self._values[indices]
        self._expose()


def decode_cache(prompts: Sequence[Sequence[KeysValues]], capacity: int) -> Cache:
    """The cache of a batch for a model's forward pass (``past_key_values=``): ``prompts[j][i]`` is the keys and
    values (``[1, heads, length_j, dim]``) of sequence ``j`` at layer ``i``, left-padded to the longest, with room for
    ``capacity`` positions in all."""
    return Cache(layers=[DecodeLayer([prompt[i] for prompt in prompts], capacity) for i in range(len(prompts[0]))])
