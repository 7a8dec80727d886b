"""Prompts read before, kept as blocks: a new prompt starts after the longest run of blocks it shares with them.

A method's requests share long beginnings: the system prompt with the environment's description (about 270-300 of
SmolLM2's 600 prompt tokens on FrozenLake), and a state's text across its candidates and its Yes/No readouts.  A
model's keys and values at a prompt's first *p* tokens depend on those tokens alone, so
:class:`qval.backbone.TransformersBackend` keeps them and, for a new prompt, reads only what comes after the part
already kept.

The backend reads every prompt in blocks of ``block`` tokens at fixed offsets (0, ``block``, 2 ``block``, ...),
and :class:`PrefixCache` keeps each whole block once, as a :class:`Block`, under the tokens from the prompt's start
to the block's end and one token beyond: every prompt that begins with those tokens uses the same block, so a
system prompt that a thousand prompts share is kept once.  Each block's keys, values and logits are computed from
the same numbers in the same shapes whether the blocks before it were read now or kept, so a prompt's logprobs do
not depend on what was read before it: a rerun gives the same floats to the last digit.

The token beyond the block is part of its key because a block may also hold the prompt's own token logprobs (a
request that echoed its prompt): the logits of a block's positions score the tokens one position later, the last of
them the next block's first token.  A block with logprobs lists the number of alternatives ``k`` they carry, and an
echo request can start after a block only if it has them for its own ``k``.  A prompt's last token is never inside
a block it uses: its logits give the first generated token.

The tensors are opaque here (the backend slices and joins them): Django-free and torch-free.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Block:
    """One block of a prompt read before: its per-layer (keys, values) at its ``block`` positions and, if the
    prompt was echoed, the logprobs of the tokens one position later (``k`` alternatives each)."""

    layers: tuple[tuple[Any, Any], ...]
    logprobs: tuple[Any, ...] | None = None
    k: int = 0


class PrefixCache:
    """Up to ``size`` blocks of ``block`` tokens (``size`` 0 keeps none), the least recently used dropped first
    (module docstring).

    Memory: a block holds ``block`` positions' keys and values, for SmolLM2-135M 46 KB a position (30 layers, 3
    key/value heads of 64 floats each, keys and values in float32), so 5.9 MB a 128-token block; the default 64
    blocks, 377 MB, hold the system prompt once and the rest of some 30 FrozenLake prompts.
    """

    def __init__(self, size: int = 64, block: int = 128) -> None:
        if block < 1:
            raise ValueError("block must be at least 1")
        self.size = size
        self.block = block
        self._blocks: OrderedDict[tuple[int, ...], Block] = OrderedDict()
        self.hits = 0
        """Prompts that started after kept blocks."""
        self.skipped = 0
        """Prompt tokens not read again, over all hits."""

    def _key(self, ids: Sequence[int], index: int) -> tuple[int, ...]:
        return tuple(ids[:(index + 1) * self.block + 1])

    def usable(self, ids: Sequence[int]) -> int:
        """How many whole blocks of ``ids`` could be kept: those ending before its last token."""
        return (len(ids) - 1) // self.block

    def __len__(self) -> int:
        return len(self._blocks)

    def find(self, ids: Sequence[int], echo_k: int | None = None) -> list[Block]:
        """The longest run of kept blocks that ``ids`` starts with (``[]``: read it all); ``len(run) * block``
        tokens need not be read again.

        ``echo_k``: the request echoes its prompt with ``k`` alternatives (only blocks with logprobs for that ``k``
        qualify).
        """
        run: list[Block] = []
        keys: list[tuple[int, ...]] = []
        for index in range(self.usable(ids)):
            key = self._key(ids, index)
            found = self._blocks.get(key)
            if found is None or (echo_k is not None and (found.logprobs is None or found.k != echo_k)):
                break
            run.append(found)
            keys.append(key)
        for key in reversed(keys):  # the first blocks, which every longer run needs, last out
            self._blocks.move_to_end(key)
        if run:
            self.hits += 1
            self.skipped += len(run) * self.block
        return run

    def add(self, ids: Sequence[int], blocks: Sequence[Block]) -> None:
        """Keep ``blocks`` as the first blocks of ``ids`` (those it cannot use are not kept; a kept block without
        logprobs is replaced by one with them), the first most recently used, dropping the least recently used
        beyond ``size``."""
        if self.size <= 0:
            return
        for index in reversed(range(min(len(blocks), self.usable(ids)))):
            key, block = self._key(ids, index), blocks[index]
            kept = self._blocks.get(key)
            if kept is not None and block.logprobs is None and kept.logprobs is not None:
                block = kept  # the kept one can serve echo requests too
            self._blocks[key] = block
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.size:
            self._blocks.popitem(last=False)
