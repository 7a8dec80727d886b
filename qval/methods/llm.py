"""The one OpenAI-compatible client of the built-in LLM methods: concurrency, retries and an on-disk cache.

:class:`LLMClient` talks to a served model with the ``openai`` SDK: ``vllm serve`` in
production, :class:`qval.backbone.BackboneServer` (our transformers-backed server) on CPU and
in tests -- over HTTP or a Unix socket.

* **Cache.**  Every response is stored under ``cache_dir`` keyed by the SHA-256 of (model
  identity, endpoint, request body); a request whose key is there is answered from disk, so
  a run that stops resumes where it was and a rerun costs no model call.  Requests carry a
  ``seed``, so a cached answer is the answer the server would give again.
* **Concurrency.**  :meth:`LLMClient.map` sends up to ``concurrency`` requests at once (the
  server batches them); results keep the input order.
* **Retries.**  The SDK retries connection errors, 408/409/429 and 5xx with back-off
  (``retries`` times), and a request to a remote server that has not answered in ``timeout_s``
  (:data:`REMOTE_TIMEOUT_S`).  A server on this machine (a Unix socket, or a checkpoint served in
  this process) is given no such limit: a request there waits only behind the requests ahead of it,
  and on a CPU 32 prompts of one batch can take longer than any fixed limit (ALFWorld's ``ranking``
  prompts, about 2,800 tokens each, took over 600 s), so a retry would only ask the busy server to read
  the same prompts again.
* **Logprob readout.**  :meth:`LLMClient.continuation_logprobs` scores a given assistant reply
  (``Yes``/``No``, a candidate action) under a chat: vLLM's ``continue_final_message`` and
  ``prompt_logprobs=0`` extensions, which our server implements too.

:func:`open_backbone` turns a backbone spec (``http://host:port[/v1]``, ``unix:/path/to.sock``
or a local checkpoint directory, which it serves itself) into a client.  Django-free.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence, TypeVar

from qval.backbone import DEFAULT_MAX_BATCH, SERVING_KEYS

if TYPE_CHECKING:
    from qval.backbone import TransformersBackend

REMOTE_TIMEOUT_S = 600.0
"""How long a request to a remote (``http(s)://``) server may go unanswered before it is retried."""

#: Requests a run sends at once: as many as our server decodes together.  On one CPU core SmolLM2 decodes a token
#: for 32 sequences in 8.2 ms a sequence, against 9.8 for 16, 13.7 for 8 and 44.8 alone
#: (``benchmarks/decode_step.py``), and vLLM batches as wide as it is sent.
DEFAULT_CONCURRENCY = DEFAULT_MAX_BATCH

T = TypeVar("T")
R = TypeVar("R")

Messages = Sequence[dict[str, str]]


class LLMError(RuntimeError):
    """The model server failed a request after every retry, or answered something unusable.

    ``refused``: the server refused this request itself (HTTP 400/413/422, e.g. a prompt longer than
    the model's context), as opposed to a server that is down or broken.
    """

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True)
class Reply:
    """One chat completion: its text and token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool


class LLMClient:
    """A chat model behind an OpenAI-compatible API (see the module docstring)."""

    def __init__(self, base_url: str, *, model: str | None = None, socket_path: str | Path | None = None,
                 cache_dir: str | Path | None = None, concurrency: int = DEFAULT_CONCURRENCY, retries: int = 3,
                 timeout_s: float | None = REMOTE_TIMEOUT_S, identity: str | None = None) -> None:
        import httpx2  # the openai SDK's own HTTP client package
        import openai

        transport = httpx2.HTTPTransport(uds=str(socket_path)) if socket_path else None
        http_client = httpx2.Client(transport=transport, timeout=timeout_s) if transport else None
        self._client = openai.OpenAI(base_url=base_url, api_key=os.environ.get("QVAL_LLM_API_KEY", "none"),
                                     max_retries=retries, timeout=timeout_s, http_client=http_client)
        self.model = model or self._served_model()
        self.identity = identity or self.model
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.concurrency = max(1, concurrency)
        self._lock = threading.Lock()
        self.prompt_tokens = self.completion_tokens = 0
        self.requests = self.cache_hits = self.failures = 0

    def _served_model(self) -> str:
        models = list(self._client.models.list())
        if not models:
            raise LLMError("the model server lists no model")
        return models[0].id

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens of the requests sent (cache hits not counted)."""
        return self.prompt_tokens + self.completion_tokens

    # -- requests ----------------------------------------------------------------------
    def _cached(self, endpoint: str, body: dict[str, Any], send: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        key = hashlib.sha256(json.dumps({"model": self.identity, "endpoint": endpoint, "body": body},
                                        sort_keys=True, ensure_ascii=True).encode()).hexdigest()
        path = self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir else None
        if path is not None and path.is_file():
            try:
                payload = json.loads(path.read_text(encoding="utf-8"))
                with self._lock:
                    self.cache_hits += 1
                return payload, True
            except (OSError, ValueError):
                pass  # a torn file from a killed run: ask again
        payload = send()
        usage = payload.get("usage") or {}
        with self._lock:
            self.requests += 1
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(payload), encoding="utf-8")
            tmp.replace(path)
        return payload, False

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        import openai

        standard = {k: v for k, v in body.items() if k in _STANDARD_CHAT_FIELDS}
        extra = {k: v for k, v in body.items() if k not in _STANDARD_CHAT_FIELDS}
        try:
            response = self._client.chat.completions.create(model=self.model, **standard, extra_body=extra or None)
        except openai.OpenAIError as exc:
            status = getattr(exc, "status_code", None)
            raise LLMError(f"the model server failed the request: {exc}", refused=status in (400, 413, 422)) from exc
        return response.model_dump()

    def chat(self, messages: Messages, *, max_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
             seed: int = 0, stop: Sequence[str] | None = None) -> Reply:
        """One chat completion (cached)."""
        body: dict[str, Any] = {"messages": [dict(m) for m in messages], "max_tokens": max_tokens,
                                "temperature": temperature, "top_p": top_p, "seed": seed}
        if stop:
            body["stop"] = list(stop)
        payload, cached = self._cached("chat", body, lambda: self._create(body))
        choice = (payload.get("choices") or [{}])[0]
        usage = payload.get("usage") or {}
        return Reply(text=(choice.get("message") or {}).get("content") or "",
                     prompt_tokens=int(usage.get("prompt_tokens") or 0),
                     completion_tokens=int(usage.get("completion_tokens") or 0), cached=cached)

    def continuation_logprobs(self, messages: Messages, continuation: str) -> list[float]:
        """The log-probabilities of the tokens of ``continuation`` as the assistant's reply to ``messages``.

        The tokens are found from the end of the prompt: the shortest suffix of decoded prompt
        tokens that covers ``continuation``.  Raises :class:`LLMError` when the server returns no
        prompt logprobs.
        """
        body: dict[str, Any] = {
            "messages": [dict(m) for m in messages] + [{"role": "assistant", "content": continuation}],
            "max_tokens": 1, "temperature": 0.0, "seed": 0,
            "add_generation_prompt": False, "continue_final_message": True, "prompt_logprobs": 0,
        }
        payload, _ = self._cached("chat", body, lambda: self._create(body))
        entries = payload.get("prompt_logprobs")
        if not entries:
            raise LLMError("the model server returned no prompt_logprobs (it must support vLLM's prompt_logprobs)")
        target = continuation.strip()
        text, values = "", []
        for entry in reversed(entries):
            if not entry:
                break
            info = next(iter(entry.values()))
            text = (info.get("decoded_token") or "") + text
            values.append(float(info["logprob"]) if info.get("logprob") is not None else math.nan)
            if len(text.strip()) >= len(target) and target in text:
                return list(reversed(values))
        raise LLMError(f"the continuation {continuation!r} is not at the end of the scored prompt")

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: Callable[[int, int], None] | None = None,
            on_error: Callable[[T], R] | None = None) -> list[R]:
        """``[fn(x) for x in items]`` with up to ``concurrency`` calls at once; ``progress(done, total)`` after each.

        With ``on_error``, an item whose ``fn`` raises :class:`LLMError` (after the SDK's retries) gets
        ``on_error(item)`` instead (``failures`` counts them), so one failed point does not fail a run;
        when every item fails and the last failure is not a refusal of the request itself
        (:attr:`LLMError.refused`) that error is raised: the backbone is down or broken.
        """
        total = len(items)
        done = failed = 0
        lock = threading.Lock()
        last_error: list[LLMError] = []

        def call(item: T) -> R:
            nonlocal done, failed
            try:
                result = fn(item)
            except LLMError as exc:
                if on_error is None:
                    raise
                result = on_error(item)
                with lock:
                    failed += 1
                    self.failures += 1
                    last_error[:] = [exc]
            with lock:
                done += 1
                if progress is not None:
                    progress(done, total)
            return result

        if self.concurrency == 1:
            results = [call(x) for x in items]
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="qval-llm") as pool:
                results = list(pool.map(call, items))
        if total and failed == total and not last_error[0].refused:
            raise last_error[0]
        return results

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()


_STANDARD_CHAT_FIELDS = frozenset({"messages", "max_tokens", "temperature", "top_p", "seed", "stop", "logprobs",
                                   "top_logprobs"})


def checkpoint_identity(path: str | Path) -> str:
    """``NAME@sha256[:16]`` of a checkpoint directory: its JSON files' bytes and every other file's name and size;
    of a single-file checkpoint (a ``.gguf`` file): its name and size.

    Cheap for multi-gigabyte weights, and enough to tell two checkpoints apart in cache keys.
    """
    path = Path(path)
    h = hashlib.sha256()
    if path.is_file():
        h.update(path.name.encode() + b"\0" + str(path.stat().st_size).encode())
        return f"{path.name}@{h.hexdigest()[:16]}"
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        h.update(rel.encode() + b"\0")
        h.update(f.read_bytes() if f.suffix == ".json" else str(f.stat().st_size).encode())
    return f"{path.name}@{h.hexdigest()[:16]}"


def method_backbone(name: str, entry: dict[str, Any], vllm: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(backbone spec for run_method, options, config)`` of the ``QVAL_BACKBONES`` entry ``entry`` named ``name``,
    for a built-in method that needs a served model (a site's gpu worker and a remote worker alike).

    ``kind: vllm``: the ``vllm serve`` process of ``vllm`` (a :class:`qval.vllm.VLLMManager`), started now when not
    healthy; ``kind: transformers``: the checkpoint (a GGUF file's digest checked first), served in this process
    as the entry says (``serving``, :data:`qval.backbone.SERVING_KEYS`);
    ``kind: upstream``: a running server. ``config`` records the backbone's kind and checkpoint identity.
    :class:`~qval.methods.registry.MethodError` for a malformed entry or a file that is not the one its digest says.
    """
    from qval.methods.registry import MethodError
    from qval.vllm import ServeSpec

    kind = entry.get("kind", "transformers")
    if kind == "vllm":
        serve = ServeSpec.from_setting(name, entry)
        server = vllm.ensure(serve)
        identity = checkpoint_identity(serve.path)
        return server.url, {"model": serve.served_model_name, "backbone_identity": identity}, {
            "backbone": name, "backbone_kind": "vllm", "checkpoint": identity,
            "served_model_name": serve.served_model_name, "server_args": list(serve.args)}
    if kind == "transformers":
        checkpoint = Path(str(entry["path"]))
        if entry.get("gguf_file"):  # a GGUF file in that directory (qval.smollm2): checked, then served from its path
            checkpoint = checkpoint / str(entry["gguf_file"])
            if entry.get("sha256"):
                from qval.smollm2 import ModelFileError, check_digest

                try:
                    check_digest(checkpoint, str(entry["sha256"]))
                except (ModelFileError, OSError) as exc:
                    raise MethodError(f"backbone {name!r}: {exc}") from exc
        identity = checkpoint_identity(checkpoint)
        serving = {key: entry[key] for key in SERVING_KEYS if key in entry}
        return str(checkpoint), {"backbone_identity": identity, "serving": serving}, {
            "backbone": name, "backbone_kind": "transformers", "checkpoint": identity}
    if kind == "upstream":
        model = str(entry.get("model") or name)
        return str(entry["url"]), {"model": model, "backbone_identity": f"{name}:{model}"}, {
            "backbone": name, "backbone_kind": "upstream", "checkpoint": None, "served_model_name": model}
    raise MethodError(f"backbone {name!r}: unknown kind {kind!r} (vllm, transformers or upstream)")


@functools.lru_cache(maxsize=1)
def loaded_checkpoint(path: Path, identity: str, serving: str = "{}") -> TransformersBackend:
    """The model of local checkpoint ``path`` (a directory or a ``.gguf`` file), loaded once per process and kept
    until another checkpoint is asked for: a worker's runs of every method on one backbone share one load (SmolLM2
    takes about a minute to load on two cores).  ``identity`` (:func:`checkpoint_identity`) is part of the key, so a
    file replaced at the same path is loaded again.  ``serving``: how it is served, a JSON object of the backbone
    entry's :data:`qval.backbone.SERVING_KEYS` (:func:`qval.backbone.serving_options`)."""
    from qval.backbone import TransformersBackend, serving_options

    return TransformersBackend(path, **serving_options(json.loads(serving)))


@contextlib.contextmanager
def open_backbone(spec: str, *, cache_dir: str | Path | None = None, concurrency: int = DEFAULT_CONCURRENCY,
                  model: str | None = None, identity: str | None = None,
                  serving: Mapping[str, Any] | None = None) -> Iterator[LLMClient]:
    """A client for ``spec``: an ``http(s)://`` URL of an OpenAI-compatible server (``/v1`` added when
    missing), ``unix:PATH`` of a socket, or a local checkpoint directory or ``.gguf`` file (e.g.
    :func:`qval.smollm2.verified_file`), served here by :class:`qval.backbone.BackboneServer` on a
    private socket for the duration.

    ``identity`` names the model in cache keys (default: the served model's name, or for a
    checkpoint directory :func:`checkpoint_identity`); a caller serving a checkpoint elsewhere
    (a vLLM server it manages) passes that checkpoint's identity, so responses of two different
    checkpoints served under one name never share cache entries.  ``serving``: how a checkpoint served here is
    served (its backbone entry's :data:`qval.backbone.SERVING_KEYS`: :func:`method_backbone`).

    Only a remote server's requests are retried after :data:`REMOTE_TIMEOUT_S` (module docstring).
    """
    if spec.startswith(("http://", "https://")):
        base = spec.rstrip("/")
        client = LLMClient(base if base.endswith("/v1") else base + "/v1", model=model, cache_dir=cache_dir,
                           concurrency=concurrency, identity=identity, timeout_s=REMOTE_TIMEOUT_S)
    elif spec.startswith("unix:"):
        client = LLMClient("http://localhost/v1", socket_path=spec[len("unix:"):], model=model, cache_dir=cache_dir,
                           concurrency=concurrency, identity=identity, timeout_s=None)
    else:
        path = Path(spec)
        if not (path / "config.json").is_file() and not (path.suffix == ".gguf" and path.is_file()):
            raise LLMError(f"backbone {spec!r} is neither an http(s):// URL, unix:PATH, a checkpoint directory "
                           f"(no config.json there) nor a .gguf file")
        from qval.backbone import BackboneServer

        checkpoint = checkpoint_identity(path)
        backend = loaded_checkpoint(path.resolve(), checkpoint, json.dumps(dict(serving or {}), sort_keys=True))
        with tempfile.TemporaryDirectory(prefix="qval-llm-") as tmp:
            with BackboneServer(backend, budget=2**62, socket_path=Path(tmp) / "llm.sock") as server:
                assert server.socket_path is not None
                client = LLMClient("http://localhost/v1", socket_path=server.socket_path, model=backend.name,
                                   cache_dir=cache_dir, concurrency=concurrency,
                                   identity=identity or checkpoint, timeout_s=None)
                try:
                    yield client
                finally:
                    client.close()
        return
    try:
        yield client
    finally:
        client.close()
