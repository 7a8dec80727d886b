"""Prompts read before: the longest stored prefix of a new prompt, so that only the rest is read again.

A method's requests share long beginnings: the system prompt with the environment's description (about 270-300 of
SmolLM2's 600 prompt tokens on FrozenLake), and a state's text across its candidates.  A model's keys and values at
a prompt's first *p* tokens depend on those tokens alone, so :class:`qval.backbone.TransformersBackend` keeps the
key/value tensors of the last few prompts it read (:class:`PrefixCache`) and, for a new prompt, starts from the
stored prompt that shares the most tokens with it.

The backend reads every prompt in blocks of ``block`` tokens at fixed offsets (0, ``block``, 2 ``block``, ...),
and a stored prompt is used up to a block boundary only.  Each block's keys, values and logits are then computed
from the same numbers in the same shapes whether the blocks before it were read now or kept, so a prompt's
logprobs do not depend on what was read before it: a rerun gives the same floats to the last digit.

An entry may also hold the prompt's own token logprobs (a request that echoed its prompt), with the number of
alternatives ``k`` they list: an echo request can start from an entry only if it has them for its own ``k``, since
the tokens it does not read again need their logprobs too.  The tokens used stop before the shared part ends
(:meth:`PrefixCache.find`), so the logprob of the prompt's first new token comes from a forward pass.

The tensors are opaque here (the backend slices them): Django-free and torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

@dataclass(frozen=True)
class Entry:
    """A prompt read before: its token ids, its per-layer (keys, values) and, if it was echoed, its token logprobs."""

    ids: tuple[int, ...]
    layers: tuple[tuple[Any, Any], ...]
    logprobs: tuple[Any, ...] | None = None
    k: int = 0


def shared_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` have in common."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    """The last ``size`` prompts read (least recently used first out; ``size`` 0 keeps none), used in whole
    blocks of ``block`` tokens (module docstring).

    Memory: an entry holds its prompt's keys and values, for SmolLM2-135M 46 KB a token (30 layers, 3 key/value
    heads of 64 floats each, keys and values in float32), so 27 MB for a 600-token prompt.
    """

    def __init__(self, size: int = 8, block: int = 128) -> None:
        if block < 1:
            raise ValueError("block must be at least 1")
        self.size = size
        self.block = block
        self._entries: list[Entry] = []
        self.hits = 0
        """Prompts that started from a stored one."""
        self.skipped = 0
        """Prompt tokens not read again, over all hits."""

    def find(self, ids: Sequence[int], echo_k: int | None = None) -> tuple[Entry | None, int]:
        """The entry to start ``ids`` from and how many of its tokens to use (``(None, 0)``: read it all).

        ``echo_k``: the request echoes its prompt with ``k`` alternatives (only entries with logprobs for that
        ``k`` qualify).  The tokens used are whole blocks before the last token the two share and before the
        prompt's last token, so at least one token is read (its logits give the next token, and the first new
        token's logprob comes from a forward pass).
        """
        best, used = None, 0
        for entry in self._entries:
            if echo_k is not None and (entry.logprobs is None or entry.k != echo_k):
                continue
            n = (min(shared_length(entry.ids, ids), len(ids)) - 1) // self.block * self.block
            if n > used:
                best, used = entry, n
        if best is None:
            return None, 0
        self._entries.remove(best)
        self._entries.append(best)
        self.hits += 1
        self.skipped += used
        return best, used

    def add(self, entry: Entry) -> None:
        """Keep ``entry`` (replacing one of the same tokens), dropping the least recently used beyond ``size``."""
        if self.size <= 0:
            return
        same = next((e for e in self._entries if e.ids == entry.ids), None)
        if same is not None and entry.logprobs is None and same.logprobs is not None:
            entry = same  # the stored one can serve echo requests too
        self._entries = [e for e in self._entries if e.ids != entry.ids]
        self._entries.append(entry)
        del self._entries[:-self.size]
