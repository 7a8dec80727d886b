"""Frozen text features of states, actions and tasks, cached per dataset fingerprint.

A :class:`Featuriser` turns texts into fixed-size float32 vectors; its :attr:`~Featuriser.name`
names it with every setting, so cached vectors are reused only for the same featuriser.

* :class:`HashedNgrams`: the cheap offline featuriser. Word unigrams and bigrams, character
  trigrams, and — for short lines, i.e. grids like FrozenLake's map — each character with its
  (row, column) and the vertical character trigrams, hashed (CRC-32, a sign from a second
  hash) into ``dim`` buckets, ``log1p`` counts, L2-normalised.  Deterministic across processes.
* :class:`CrossedNgrams`: :class:`HashedNgrams` plus *pair* features of a (state, action): every
  feature of the state crossed with every word and word bigram of the action, hashed into ``dim``
  buckets the same way.  A state's n-grams around the agent (``h@f``, the vertical ``v:h@f``) crossed
  with ``left`` say what a move meets; the nets get them as a fourth field (:attr:`Featuriser.pair_dim`),
  so a Q-value can depend on the state and action jointly, not only through the MLP.
* :class:`TabularGrid`: exact one-hot features of an ASCII-grid state (FrozenLake): the map (its
  text without the agent, hashed into ``maps`` buckets) × the agent's cell, and the pair feature
  one-hot over map × cell × action.  A representation check, not a general featuriser: every
  (map, cell, action) of a map seen in training has its own weight, so a method's errors with it
  are errors of its algorithm or targets.
* :class:`SmolLM2Hidden`: SmolLM2-135M-Instruct (:mod:`qval.smollm2`, the model every install has) read
  in-process: a text's mean-pooled final hidden layer, and for a (state, action) pair the final hidden state at
  the last token of the state followed by the action (the state's key/value cache shared by its actions), as
  QLASS and Best-of-Q put their heads on an LLM's representation.  Torch is imported only when it encodes.
* :class:`EmbeddingsEndpoint`: an OpenAI-compatible ``POST /v1/embeddings`` (vLLM's pooling
  models in production; :mod:`qval.backbone`'s own server — mean-pooled last hidden layer — on
  CPU).
* :class:`LocalBackbone`: a local transformers checkpoint (``local:PATH``) encoded in-process,
  the same mean-pooled last hidden layer; its name carries :func:`checkpoint_digest`, so a
  changed checkpoint never reuses cached vectors.  ``amc-value`` with ``lora`` fine-tunes this
  backbone (:mod:`qval.learned.lora`) instead of reading frozen vectors.  Torch is imported only
  when it encodes.
* :class:`FeatureCache`: vectors keyed by SHA-256 of the text, stored under
  ``{cache_dir}/{fingerprint}/{featuriser name}/`` (``keys.json`` + ``vectors.npy``, replaced
  atomically), so a retrain or a scoring run on the same dataset encodes nothing twice.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import zlib
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import requests

WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")
GRID_LINE_MAX = 32
"""Lines at most this long (and texts with at most this many lines) also get positional features."""


class Featuriser(Protocol):
    """Texts → float32 vectors of a fixed size; some also encode (state, action) pairs jointly."""

    name: str
    dim: int
    pair_dim: int
    """Size of :meth:`encode_pairs` vectors; 0: the featuriser has no pair features."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """A ``(len(texts), dim)`` float32 array."""

    def encode_pairs(self, states: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        """A ``(len(states), pair_dim)`` float32 array of joint features of ``(states[i], actions[i])``."""


def _no_pairs(featuriser: Featuriser) -> None:
    raise ValueError(f"featuriser {featuriser.name} has no pair features")


class HashedNgrams:
    """Hashed word and character n-grams (plus positional grid features) of a text."""

    def __init__(self, dim: int = 1024) -> None:
        if dim < 16:
            raise ValueError(f"dim must be at least 16, got {dim}")
        self.dim = dim
        self.name = f"hashed-ngrams-v1-{dim}"

    pair_dim = 0

    def tokens(self, text: str) -> list[str]:
        """The feature strings of ``text`` (before hashing)."""
        low = text.lower()
        words = WORD.findall(low)
        feats = [f"w:{w}" for w in words]
        feats += [f"b:{a} {b}" for a, b in zip(words, words[1:])]
        squashed = " ".join(low.split())
        feats += [f"c:{squashed[i:i + 3]}" for i in range(max(0, len(squashed) - 2))]
        lines = text.splitlines()
        if lines and len(lines) <= GRID_LINE_MAX:
            grid = [line for line in lines if 0 < len(line) <= GRID_LINE_MAX]
            for r, line in enumerate(grid):
                feats += [f"p:{r}:{c}:{ch}" for c, ch in enumerate(line)]
                if r + 2 < len(grid):
                    below, below2 = grid[r + 1], grid[r + 2]
                    feats += [f"v:{ch}{below[c]}{below2[c]}" for c, ch in enumerate(line)
                              if c < len(below) and c < len(below2)]
        return feats

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            hashes = _hashes(self.tokens(text))
            _add_signed(out[i], hashes[:, 0], hashes[:, 1])
        return out

    def encode_pairs(self, states: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        _no_pairs(self)
        return np.zeros((0, 0), dtype=np.float32)


def _hashes(feats: Sequence[str]) -> np.ndarray:
    """``(len(feats), 2)`` uint64: CRC-32 of each feature string and its sign bit (Adler-32's lowest bit)."""
    out = np.zeros((len(feats), 2), dtype=np.uint64)
    for i, feat in enumerate(feats):
        data = feat.encode()
        out[i] = (zlib.crc32(data), zlib.adler32(data) & 1)
    return out


def _add_signed(row: np.ndarray, hashes: np.ndarray, signs: np.ndarray) -> None:
    """Add ±1 at ``hashes % len(row)`` (+1 where the sign bit is set), then ``log1p`` the counts and L2-normalise."""
    np.add.at(row, (hashes % np.uint64(len(row))).astype(np.int64), np.where(signs == 1, 1.0, -1.0))
    np.copysign(np.log1p(np.abs(row)), row, out=row)
    norm = float(np.linalg.norm(row))
    if norm > 0:
        row /= norm


class CrossedNgrams(HashedNgrams):
    """:class:`HashedNgrams` for single texts, and pair features: each state feature × each action word / bigram."""

    def __init__(self, dim: int = 1024) -> None:
        super().__init__(dim)
        self.name = f"crossed-ngrams-v1-{dim}"
        self.pair_dim = dim

    def action_tokens(self, action: str) -> list[str]:
        """The action's side of the cross: its words and word bigrams."""
        words = WORD.findall(action.lower())
        return words + [f"{a} {b}" for a, b in zip(words, words[1:])]

    def encode_pairs(self, states: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        if len(states) != len(actions):
            raise ValueError(f"{len(states)} states but {len(actions)} actions")
        out = np.zeros((len(states), self.dim), dtype=np.float32)
        memo: dict[str, np.ndarray] = {}
        for i, (state, action) in enumerate(zip(states, actions)):
            if state not in memo:
                memo[state] = _hashes(self.tokens(state))
            s, a = memo[state], _hashes([f"x:{t}" for t in self.action_tokens(action)])
            # a multiplicative mix of the two CRCs (64-bit, wrapping), its high bits as the bucket
            mixed = (s[:, None, 0] * np.uint64(0x9E3779B97F4A7C15)) ^ (a[None, :, 0] * np.uint64(0xC2B2AE3D27D4EB4F))
            mixed = (mixed ^ (mixed >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9)
            _add_signed(out[i], (mixed >> np.uint64(20)).ravel(), (s[:, None, 1] ^ a[None, :, 1]).ravel())
        return out


GRID_AGENT = "@"
"""The agent's marker in a grid observation (FrozenLake's)."""
GRID_FLOOR = ("F", "S")
"""The cells a grid agent stands on between steps (FrozenLake's ice and start), one kind for a map's identity."""


class TabularGrid:
    """Exact one-hot features of grid states (see the module docstring).

    ``encode``: a grid state (its short lines, as FrozenLake's observation below its legend)
    → one-hot of ``map bucket * cells + cell``; an action of ``actions`` → one-hot of its index; any
    other text (a task name) → one-hot of its CRC-32 modulo :attr:`dim`.  ``encode_pairs``: one-hot of
    ``(map bucket * cells + cell) * len(actions) + action index``.  Maps are told apart by the CRC-32 of
    the grid with the agent and the floor kinds (:data:`GRID_FLOOR`) written as one, modulo ``maps``;
    :meth:`map_bucket` lets a check confirm its maps differ.
    """

    def __init__(self, maps: int = 16, cells: int = 64, actions: Sequence[str] | None = None) -> None:
        if maps < 1 or cells < 1:
            raise ValueError(f"maps and cells must be positive, got {maps} and {cells}")
        if actions is None:
            from qval.envs.frozenlake.adapter import ACTIONS

            actions = ACTIONS
        self.maps, self.cells, self.actions = maps, cells, tuple(actions)
        self.dim = maps * cells
        self.pair_dim = self.dim * len(self.actions)
        self.name = f"tabular-grid-v1-{maps}x{cells}x{len(self.actions)}"

    def grid(self, text: str) -> list[str] | None:
        """The grid lines of ``text`` (its lines of at most :data:`GRID_LINE_MAX` characters), or None unless
        exactly one of them holds the agent."""
        grid = [line for line in text.splitlines() if 0 < len(line) <= GRID_LINE_MAX]
        if sum(line.count(GRID_AGENT) for line in grid) != 1:
            return None
        return grid

    def map_bucket(self, text: str) -> int:
        """The map's bucket of a grid state."""
        grid = self.grid(text)
        if grid is None:
            raise ValueError(f"not a grid state with one {GRID_AGENT!r}: {text[:60]!r}")
        key = "\n".join(grid)
        for covered in (GRID_AGENT, *GRID_FLOOR[1:]):  # the agent hides its cell: the floor it may stand on is one
            key = key.replace(covered, GRID_FLOOR[0])
        return zlib.crc32(key.encode()) % self.maps

    def state_index(self, text: str) -> int:
        """``map bucket * cells + cell`` of a grid state."""
        grid = self.grid(text)
        if grid is None:
            raise ValueError(f"not a grid state with one {GRID_AGENT!r}: {text[:60]!r}")
        row = next(r for r, line in enumerate(grid) if GRID_AGENT in line)
        cell = row * len(grid[0]) + grid[row].index(GRID_AGENT)
        if cell >= self.cells:
            raise ValueError(f"a grid of {len(grid)}×{len(grid[0])} cells does not fit {self.cells} cells")
        return self.map_bucket(text) * self.cells + cell

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            if text in self.actions:
                out[i, self.actions.index(text)] = 1.0
            elif self.grid(text) is not None:
                out[i, self.state_index(text)] = 1.0
            else:
                out[i, zlib.crc32(text.encode()) % self.dim] = 1.0
        return out

    def encode_pairs(self, states: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(states), self.pair_dim), dtype=np.float32)
        for i, (state, action) in enumerate(zip(states, actions)):
            if action not in self.actions:
                raise ValueError(f"{action!r} is not one of the grid's actions {self.actions}")
            out[i, self.state_index(state) * len(self.actions) + self.actions.index(action)] = 1.0
        return out


class EmbeddingsEndpoint:
    """An OpenAI-compatible ``/v1/embeddings`` server (``url`` like ``http://127.0.0.1:8001``)."""

    def __init__(self, url: str, model: str, dim: int, batch_size: int = 32, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.dim = dim
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.name = f"embeddings-{re.sub(r'[^A-Za-z0-9_.-]', '_', model)}-{dim}"

    pair_dim = 0

    def encode_pairs(self, states: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        _no_pairs(self)
        return np.zeros((0, 0), dtype=np.float32)

    @classmethod
    def probe(cls, url: str, model: str, **kwargs: Any) -> "EmbeddingsEndpoint":
        """Ask the server once for the embedding size of ``model``."""
        endpoint = cls(url, model, dim=0, **kwargs)
        endpoint.dim = endpoint._request(["probe"]).shape[1]
        endpoint.name = f"embeddings-{re.sub(r'[^A-Za-z0-9_.-]', '_', model)}-{endpoint.dim}"
        return endpoint

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            resp = requests.post(f"{self.url}/v1/embeddings", json={"model": self.model, "input": texts},
                                 timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise RuntimeError(f"embeddings server {self.url} unreachable: {exc}") from exc
        if resp.status_code != 200:
            raise RuntimeError(f"embeddings server {self.url} answered HTTP {resp.status_code}: {resp.text[:300]}")
        data = sorted(resp.json()["data"], key=lambda d: d["index"])
        if len(data) != len(texts):
            raise RuntimeError(f"embeddings server {self.url} returned {len(data)} vectors for {len(texts)} texts")
        return np.asarray([d["embedding"] for d in data], dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        parts = [self._request(list(texts[i:i + self.batch_size])) for i in range(0, len(texts), self.batch_size)]
        out = np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)
        if out.shape[1:] != (self.dim,):
            raise RuntimeError(f"embeddings server {self.url} returned vectors of shape {out.shape[1:]}, expected ({self.dim},)")
        return out


def checkpoint_digest(path: str | Path) -> str:
    """SHA-256 over the names and contents of the files directly in checkpoint folder ``path``.

    Hashing a large checkpoint takes seconds, so the digest is kept per process for the files' names,
    sizes and modification times: a file rewritten since is hashed again."""
    folder = Path(path).resolve()
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} is not a local transformers checkpoint (no config.json)")
    files = sorted(f for f in folder.iterdir() if f.is_file())
    signature = tuple((f.name, st.st_size, st.st_mtime_ns) for f in files for st in [f.stat()])
    return _hash_files(str(folder), signature)


@functools.lru_cache(maxsize=32)
def _hash_files(folder: str, signature: tuple[tuple[str, int, int], ...]) -> str:
    """The digest of :func:`checkpoint_digest` for the files named in ``signature`` (kept per signature)."""
    h = hashlib.sha256()
    for name, _, _ in signature:
        h.update(name.encode() + b"\0")
        with (Path(folder) / name).open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


class LocalBackbone:
    """A local transformers checkpoint, mean-pooled last hidden layer computed in this process."""

    def __init__(self, path: str | Path, batch_size: int = 32) -> None:
        self.path = Path(path).resolve()
        self.digest = checkpoint_digest(self.path)
        config = json.loads((self.path / "config.json").read_text())
        if not isinstance(config.get("hidden_size"), int):
            raise ValueError(f"{self.path}/config.json names no hidden_size")
        self.dim = config["hidden_size"]
        self.batch_size = batch_size
        self.name = f"local-{re.sub(r'[^A-Za-z0-9_.-]', '_', self.path.name)}-{self.dim}-{self.digest[:12]}"
        self._encoder: Any = None

    pair_dim = 0

    def encode_pairs(self, states: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        _no_pairs(self)
        return np.zeros((0, 0), dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self._encoder is None:
            from qval.learned.lora import BackboneEncoder  # torch, transformers

            self._encoder = BackboneEncoder(self.path)
        import torch

        with torch.no_grad():
            return self._encoder.encode(list(texts), self.batch_size).numpy()


MEMO_STATES = 100_000
"""At most this many states' :meth:`SmolLM2Hidden.encode` vectors are kept from :meth:`~SmolLM2Hidden.encode_pairs`
(2.3 kB each)."""
SHARED_MIN_TOKENS = 8
"""A token prefix shared by the states of one :meth:`SmolLM2Hidden.encode_pairs` call is run once when at least this long."""
PAIR_ACTION_PREFIX = "\nAction: "
"""What joins a state's text and an action's in :class:`SmolLM2Hidden`'s pair input (``state + PREFIX + action``)."""


@functools.lru_cache(maxsize=1)
def _smollm2_backend() -> Any:
    """SmolLM2-135M-Instruct loaded once per process (:mod:`qval.smollm2`: the wheel's GGUF file, digest checked),
    as :mod:`qval.backbone` loads it."""
    from qval import smollm2
    from qval.backbone import backend_from_spec

    return backend_from_spec(smollm2.BACKBONE_NAME, smollm2.backbone_spec())


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` with each non-zero row scaled to length 1 (in place)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


class SmolLM2Hidden:
    """SmolLM2-135M-Instruct's final hidden layer (after its last norm) as frozen features (module docstring).

    :meth:`encode`: the mean over a text's tokens (at most ``max_tokens``, right-padded batches of ``batch_size``
    sorted by length) -- the direction of :mod:`qval.backbone`'s ``/v1/embeddings`` vectors.  :meth:`encode_pairs`: the
    hidden state at the *last* token of ``state + PAIR_ACTION_PREFIX + action`` (the state's tokens, then the
    action line's, tokenised apart), i.e. what the model holds after reading the action in the state's context,
    as QLASS and Best-of-Q read an LLM's representation of (state, action) at its last token.  Each distinct
    state is run once and its key/value cache reused for all its actions, a token prefix that the states share
    (FrozenLake's legend line) is run once and its cache continued, and the state's pass's mean is kept as its
    :meth:`encode` vector (callers encode pairs first: one pass a state).  All under
    ``torch.inference_mode()``.  ``backend``: a loaded :class:`qval.backbone.TransformersBackend` of the model
    (tests share the session's); default: :func:`_smollm2_backend`, loaded at the first encode.  The name
    carries the model file's SHA-256, so a :class:`FeatureCache` on disk keeps vectors per (text digest, model
    digest) and a retrain encodes nothing again.  Every vector is scaled to length 1, as the n-gram featurisers'
    (the final layer's raw norms run to the hundreds, carried by a few outlier dimensions), so the methods'
    learning rates apply unchanged.
    """

    def __init__(self, backend: Any = None, batch_size: int = 16, max_tokens: int = 512) -> None:
        from qval import smollm2

        if batch_size < 1 or max_tokens < 8:
            raise ValueError(f"batch_size must be at least 1 and max_tokens at least 8, got {batch_size} and {max_tokens}")
        self.dim = self.pair_dim = smollm2.HIDDEN_SIZE
        self.digest = smollm2.SHA256
        self.batch_size, self.max_tokens = batch_size, max_tokens
        self.name = f"smollm2-135m-hidden-v1-{self.dim}-{self.digest[:12]}"
        self._backend = backend
        self._shared: tuple[list[int], Any, Any] | None = None
        """The token prefix the states of an :meth:`encode_pairs` call shared, its cache and its hidden states' sum."""
        self._means: dict[str, np.ndarray] = {}
        """:meth:`encode`'s vector of each state :meth:`encode_pairs` ran as a prefix (the same forward pass)."""

    def _model(self) -> tuple[Any, Any]:
        """``(tokenizer, body)``: the model's tokenizer and its transformer body (no LM head)."""
        if self._backend is None:
            self._backend = _smollm2_backend()
        body = self._backend.model.base_model
        if int(body.config.hidden_size) != self.dim:
            raise ValueError(f"the loaded model has hidden size {body.config.hidden_size}, not SmolLM2-135M's {self.dim}")
        return self._backend.tokenizer, body

    def _ids(self, tokenizer: Any, text: str, special: bool) -> list[int]:
        """The token ids of ``text`` (with the tokenizer's special tokens when ``special``)."""
        return list(tokenizer(text, add_special_tokens=special)["input_ids"])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        tokenizer, body = self._model()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo = []
        for i, text in enumerate(texts):
            if text in self._means:
                out[i] = self._means[text]
            else:
                todo.append(i)
        ids = {i: self._ids(tokenizer, texts[i], True)[:self.max_tokens] or [tokenizer.eos_token_id or 0] for i in todo}
        order = sorted(todo, key=lambda i: len(ids[i]))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                width = max(len(ids[i]) for i in rows)
                input_ids = torch.tensor([ids[i] + [0] * (width - len(ids[i])) for i in rows], device=body.device)
                mask = torch.tensor([[1] * len(ids[i]) + [0] * (width - len(ids[i])) for i in rows], device=body.device)
                hidden = body(input_ids=input_ids, attention_mask=mask).last_hidden_state.float()
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                out[rows] = _unit_rows(((hidden * weights).sum(1) / weights.sum(1)).cpu().numpy())
        return out

    def _share(self, prefixes: list[list[int]], body: Any) -> None:
        """Run the token prefix that all of ``prefixes`` share (two or more of them differ; FrozenLake's legend line,
        say) once and keep its cache for :meth:`_prefix_pass`, unless a kept one still fits or it is short."""
        distinct = list({tuple(p): p for p in prefixes}.values())
        if len(distinct) < 2:
            return
        common = os.path.commonprefix(distinct)
        if len(common) < SHARED_MIN_TOKENS or len(common) >= min(len(p) for p in distinct):
            return
        if self._shared is not None and all(p[:len(self._shared[0])] == self._shared[0] for p in distinct):
            return
        import torch

        ran = body(input_ids=torch.tensor([common], device=body.device), use_cache=True)
        self._shared = (list(common), ran.past_key_values, ran.last_hidden_state[0].float().sum(0))

    def _prefix_pass(self, prefix: list[int], body: Any) -> tuple[Any, Any]:
        """The key/value cache of ``prefix`` and the sum of its tokens' final hidden states, continuing the kept
        shared prefix (:meth:`_share`) when ``prefix`` starts with it and goes on."""
        import torch

        shared = self._shared
        if shared is not None and len(prefix) > len(shared[0]) and prefix[:len(shared[0])] == shared[0]:
            cache = copy.deepcopy(shared[1])
            ran = body(input_ids=torch.tensor([prefix[len(shared[0]):]], device=body.device), past_key_values=cache,
                       use_cache=True)
            return ran.past_key_values, shared[2] + ran.last_hidden_state[0].float().sum(0)
        ran = body(input_ids=torch.tensor([prefix], device=body.device), use_cache=True)
        return ran.past_key_values, ran.last_hidden_state[0].float().sum(0)

    def encode_pairs(self, states: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        if len(states) != len(actions):
            raise ValueError(f"{len(states)} states but {len(actions)} actions")
        out = np.zeros((len(states), self.pair_dim), dtype=np.float32)
        if not states:
            return out
        import torch

        tokenizer, body = self._model()
        rows_of: dict[str, list[int]] = {}
        for i, state in enumerate(states):
            rows_of.setdefault(state, []).append(i)
        suffixes_of = {state: [self._ids(tokenizer, PAIR_ACTION_PREFIX + actions[i], False)[:self.max_tokens // 2]
                               for i in rows] for state, rows in rows_of.items()}
        prefixes = {}
        for state, suffixes in suffixes_of.items():
            full = self._ids(tokenizer, state, True)
            prefixes[state] = (full, full[:self.max_tokens - max(len(x) for x in suffixes)] or [tokenizer.eos_token_id or 0])
        with torch.inference_mode():
            self._share([prefix for _, prefix in prefixes.values()], body)
            for state, rows in rows_of.items():
                suffixes, (full, prefix) = suffixes_of[state], prefixes[state]
                cache, hidden_sum = self._prefix_pass(prefix, body)
                if prefix == full and len(self._means) < MEMO_STATES:  # the whole state: encode()'s pass too
                    self._means[state] = _unit_rows((hidden_sum / len(prefix)).unsqueeze(0).cpu().numpy())[0]
                for start in range(0, len(rows), self.batch_size):
                    part = list(range(start, min(start + self.batch_size, len(rows))))
                    width = max(len(suffixes[j]) for j in part)
                    step_cache = copy.deepcopy(cache)
                    if len(part) > 1:
                        step_cache.batch_repeat_interleave(len(part))
                    input_ids = torch.tensor([suffixes[j] + [0] * (width - len(suffixes[j])) for j in part],
                                             device=body.device)
                    mask = torch.tensor([[1] * len(prefix) + [1] * len(suffixes[j]) + [0] * (width - len(suffixes[j]))
                                         for j in part], device=body.device)
                    hidden = body(input_ids=input_ids, attention_mask=mask, past_key_values=step_cache,
                                  use_cache=True).last_hidden_state.float()
                    last = torch.tensor([len(suffixes[j]) - 1 for j in part], device=hidden.device)
                    out[[rows[j] for j in part]] = hidden[torch.arange(len(part), device=hidden.device), last].cpu().numpy()
        return _unit_rows(out)


def featuriser_from_spec(spec: str) -> Featuriser:
    """``hashed`` / ``hashed:DIM`` → :class:`HashedNgrams`; ``crossed`` / ``crossed:DIM`` → :class:`CrossedNgrams`;
    ``tabular`` / ``tabular:MAPS`` → :class:`TabularGrid`; ``smollm2`` → :class:`SmolLM2Hidden`;
    ``http://HOST:PORT#MODEL`` → :class:`EmbeddingsEndpoint`;
    ``local:PATH`` → :class:`LocalBackbone`."""
    kind, _, arg = spec.partition(":")
    if kind in ("hashed", "crossed", "tabular") and not spec.startswith(("http:", "https:")):
        if arg and not arg.isdigit():
            raise ValueError(f"featuriser {spec!r}: the part after ':' must be a whole number")
        if kind == "tabular":
            return TabularGrid(int(arg) if arg else 16)
        return (HashedNgrams if kind == "hashed" else CrossedNgrams)(int(arg) if arg else 1024)
    if spec.startswith("http://") or spec.startswith("https://"):
        url, _, model = spec.partition("#")
        if not model:
            raise ValueError(f"featuriser {spec!r}: name the model after '#', e.g. http://127.0.0.1:8001#my-model")
        return EmbeddingsEndpoint.probe(url, model)
    if spec.startswith("local:"):
        return LocalBackbone(spec.removeprefix("local:"))
    if spec == "smollm2":
        return SmolLM2Hidden()
    raise ValueError(f"unknown featuriser {spec!r}; expected 'hashed', 'hashed:DIM', 'crossed', 'crossed:DIM', "
                     f"'tabular', 'tabular:MAPS', 'smollm2', 'http://HOST:PORT#MODEL' or 'local:PATH'")


class _Vectors:
    """Vectors by key, kept on disk in ``folder`` (``keys.json`` + ``vectors.npy``, replaced atomically)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.index: dict[str, int] = {}
        self.rows: list[np.ndarray] = []
        if folder is not None and (folder / "keys.json").is_file():
            keys = json.loads((folder / "keys.json").read_text())
            matrix = np.load(folder / "vectors.npy")
            if len(keys) == len(matrix):
                self.index = {k: i for i, k in enumerate(keys)}
                self.rows = list(matrix)

    def get(self, keys: Sequence[str], missing: Callable[[list[str]], np.ndarray], dim: int) -> tuple[np.ndarray, int]:
        """Vectors of ``keys``; ``missing(keys not held yet)`` encodes the others (each once).  Also: how many it encoded."""
        todo = list(dict.fromkeys(k for k in keys if k not in self.index))
        if todo:
            for key, vec in zip(todo, missing(todo)):
                self.index[key] = len(self.rows)
                self.rows.append(np.asarray(vec, dtype=np.float32))
            self._save()
        if not keys:
            return np.zeros((0, dim), dtype=np.float32), len(todo)
        return np.stack([self.rows[self.index[k]] for k in keys]), len(todo)

    def _save(self) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = sorted(self.index, key=self.index.__getitem__)
        tmp = self.folder / "vectors.tmp.npy"
        np.save(tmp, np.stack(self.rows))
        tmp.replace(self.folder / "vectors.npy")
        tmp_keys = self.folder / "keys.json.tmp"
        tmp_keys.write_text(json.dumps(keys))
        tmp_keys.replace(self.folder / "keys.json")


class FeatureCache:
    """Vectors of one featuriser for one dataset fingerprint, kept on disk (pair vectors in ``pairs/``)."""

    def __init__(self, featuriser: Featuriser, cache_dir: str | Path | None, fingerprint: str) -> None:
        self.featuriser = featuriser
        self.folder = Path(cache_dir) / fingerprint / featuriser.name if cache_dir is not None else None
        self._texts = _Vectors(self.folder)
        self._pairs: _Vectors | None = None
        self.encoded = 0
        """Texts and pairs this cache sent to the featuriser (the others came from disk or memory)."""

    @property
    def pair_dim(self) -> int:
        """The featuriser's :attr:`Featuriser.pair_dim` (0: no pair features)."""
        return int(getattr(self.featuriser, "pair_dim", 0))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` (encoding only the ones not cached yet)."""
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        text_of = dict(zip(keys, texts))
        out, encoded = self._texts.get(keys, lambda todo: self.featuriser.encode([text_of[k] for k in todo]),
                                       self.featuriser.dim)
        self.encoded += encoded
        return out

    def encode_pairs(self, states: Sequence[str], actions: Sequence[str]) -> np.ndarray:
        """Pair vectors of ``(states[i], actions[i])`` (encoding only the pairs not cached yet)."""
        if not self.pair_dim:
            _no_pairs(self.featuriser)
        if self._pairs is None:
            self._pairs = _Vectors(self.folder / "pairs" if self.folder is not None else None)
        keys = [hashlib.sha256(s.encode() + b"\0" + a.encode()).hexdigest() for s, a in zip(states, actions)]
        pair_of = {k: (s, a) for k, s, a in zip(keys, states, actions)}

        def missing(todo: list[str]) -> np.ndarray:
            return self.featuriser.encode_pairs([pair_of[k][0] for k in todo], [pair_of[k][1] for k in todo])

        out, encoded = self._pairs.get(keys, missing, self.pair_dim)
        self.encoded += encoded
        return out
