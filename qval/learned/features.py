"""Frozen text features of states, actions and tasks, cached per dataset fingerprint.

A :class:`Featuriser` turns texts into fixed-size float32 vectors; its :attr:`~Featuriser.name`
names it with every setting, so cached vectors are reused only for the same featuriser.

* :class:`HashedNgrams`: the cheap offline featuriser. Word unigrams and bigrams, character
  trigrams, and — for short lines, i.e. grids like FrozenLake's map — each character with its
  (row, column) and the vertical character trigrams, hashed (CRC-32, a sign from a second
  hash) into ``dim`` buckets, ``log1p`` counts, L2-normalised.  Deterministic across processes.
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
from typing import Any, Protocol, Sequence

import numpy as np
import requests

WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")
GRID_LINE_MAX = 32
"""Lines at most this long (and texts with at most this many lines) also get positional features."""


class Featuriser(Protocol):
    """Texts → float32 vectors of a fixed size."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """A ``(len(texts), dim)`` float32 array."""


class HashedNgrams:
    """Hashed word and character n-grams (plus positional grid features) of a text."""

    def __init__(self, dim: int = 1024) -> None:
        if dim < 16:
            raise ValueError(f"dim must be at least 16, got {dim}")
        self.dim = dim
        self.name = f"hashed-ngrams-v1-{dim}"

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
            row = out[i]
            for feat in self.tokens(text):
                data = feat.encode()
                h = zlib.crc32(data)
                sign = 1.0 if zlib.adler32(data) & 1 else -1.0
                row[h % self.dim] += sign
            np.copysign(np.log1p(np.abs(row)), row, out=row)
            norm = float(np.linalg.norm(row))
            if norm > 0:
                row /= norm
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

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self._encoder is None:
            from qval.learned.lora import BackboneEncoder  # torch, transformers

            self._encoder = BackboneEncoder(self.path)
        import torch

        with torch.no_grad():
            return self._encoder.encode(list(texts), self.batch_size).numpy()


def featuriser_from_spec(spec: str) -> Featuriser:
    """``hashed`` / ``hashed:DIM`` → :class:`HashedNgrams`; ``http://HOST:PORT#MODEL`` → :class:`EmbeddingsEndpoint`;
    ``local:PATH`` → :class:`LocalBackbone`."""
    if spec == "hashed" or spec.startswith("hashed:"):
        _, _, dim = spec.partition(":")
        return HashedNgrams(int(dim) if dim else 1024)
    if spec.startswith("http://") or spec.startswith("https://"):
        url, _, model = spec.partition("#")
        if not model:
            raise ValueError(f"featuriser {spec!r}: name the model after '#', e.g. http://127.0.0.1:8001#my-model")
        return EmbeddingsEndpoint.probe(url, model)
    if spec.startswith("local:"):
        return LocalBackbone(spec.removeprefix("local:"))
    raise ValueError(f"unknown featuriser {spec!r}; expected 'hashed', 'hashed:DIM', 'http://HOST:PORT#MODEL' "
                     f"or 'local:PATH'")


class FeatureCache:
    """Vectors of one featuriser for one dataset fingerprint, kept on disk."""

    def __init__(self, featuriser: Featuriser, cache_dir: str | Path | None, fingerprint: str) -> None:
        self.featuriser = featuriser
        self.folder = Path(cache_dir) / fingerprint / featuriser.name if cache_dir is not None else None
        self._index: dict[str, int] = {}
        self._rows: list[np.ndarray] = []
        self.encoded = 0
        """Texts this cache sent to the featuriser (the others came from disk or memory)."""
        if self.folder is not None and (self.folder / "keys.json").is_file():
            keys = json.loads((self.folder / "keys.json").read_text())
            matrix = np.load(self.folder / "vectors.npy")
            if len(keys) == len(matrix):
                self._index = {k: i for i, k in enumerate(keys)}
                self._rows = list(matrix)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` (encoding only the ones not cached yet)."""
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts):
            if key not in self._index and key not in missing:
                missing[key] = text
        if missing:
            vectors = self.featuriser.encode(list(missing.values()))
            for key, vec in zip(missing, vectors):
                self._index[key] = len(self._rows)
                self._rows.append(np.asarray(vec, dtype=np.float32))
            self.encoded += len(missing)
            self._save()
        if not keys:
            return np.zeros((0, self.featuriser.dim), dtype=np.float32)
        return np.stack([self._rows[self._index[k]] for k in keys])

    def _save(self) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = sorted(self._index, key=self._index.__getitem__)
        tmp = self.folder / "vectors.tmp.npy"
        np.save(tmp, np.stack(self._rows))
        tmp.replace(self.folder / "vectors.npy")
        tmp_keys = self.folder / "keys.json.tmp"
        tmp_keys.write_text(json.dumps(keys))
        tmp_keys.replace(self.folder / "keys.json")
