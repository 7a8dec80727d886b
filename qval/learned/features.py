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

import functools
import hashlib
import json
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


def featuriser_from_spec(spec: str) -> Featuriser:
    """``hashed`` / ``hashed:DIM`` → :class:`HashedNgrams`; ``crossed`` / ``crossed:DIM`` → :class:`CrossedNgrams`;
    ``tabular`` / ``tabular:MAPS`` → :class:`TabularGrid`; ``http://HOST:PORT#MODEL`` → :class:`EmbeddingsEndpoint`;
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
    raise ValueError(f"unknown featuriser {spec!r}; expected 'hashed', 'hashed:DIM', 'crossed', 'crossed:DIM', "
                     f"'tabular', 'tabular:MAPS', 'http://HOST:PORT#MODEL' or 'local:PATH'")


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
