"""The platform's model server for method containers: an OpenAI-compatible API with a token budget.

A method container that asked for a backbone reaches the model through one Unix socket
mounted into it (``/run/qval/backbone.sock``; the container has no network).  The worker
starts one :class:`BackboneServer` per job, in front of a :class:`Backend`:

* :class:`TransformersBackend`: a causal LM loaded from a local checkpoint directory or GGUF
  file with ``transformers`` (CPU or GPU; tests use a tiny random-weight model from
  :func:`make_tiny_model`, and SmolLM2-135M-Instruct of :mod:`qval.smollm2`);
* :class:`UpstreamBackend`: forwards to an OpenAI-compatible server, e.g. ``vllm serve`` on
  a GPU worker, and reads the token counts from its ``usage``.

Endpoints (JSON over HTTP/1.1, a subset of the OpenAI API that vLLM also serves):

* ``GET /health`` (200, as vLLM's) and ``GET /v1/models``;
* ``POST /v1/chat/completions``: ``messages``, ``max_tokens`` (or ``max_completion_tokens``),
  ``temperature``, ``top_p``, ``seed``, ``stop``, ``logprobs`` + ``top_logprobs`` (≤ 20), and
  vLLM's extensions for scoring a given assistant text: ``add_generation_prompt`` (default true),
  ``continue_final_message`` (the last message is an assistant message to continue, not to
  close) and ``prompt_logprobs`` (0 only here: the response's top-level ``prompt_logprobs`` lists,
  per prompt token, ``None`` for the first and otherwise ``{token_id: {"logprob", "rank",
  "decoded_token"}}`` holding the prompt's own token);
* ``POST /v1/completions``: ``prompt``, ``max_tokens`` (may be 0), ``temperature``, ``top_p``,
  ``seed``, ``stop``, ``logprobs`` (≤ 20) and ``echo`` (the prompt's own token logprobs, for
  scoring an action by its likelihood);
* ``POST /v1/embeddings``: ``input`` (a string or a list of strings): the mean over the tokens of
  the last hidden layer, one vector per input (local backends; for vLLM point the client at
  vLLM's own pooling endpoint).

``n`` > 1 and ``stream`` are refused with a 400.  Sampling without a ``seed`` uses seed 0, so a
rerun of a job sends the same answers.  Every response carries ``usage``.

**Token budget.**  Each job may use ``budget`` tokens (prompt + completion, summed over its
requests).  With a local backend the prompt is tokenised first: a request whose prompt does
not fit in what is left is refused with HTTP 429 (``code: token_budget_exceeded``), and
``max_tokens`` is cut to what is left after the prompt, so a job never uses more than its
budget.  An upstream server counts the prompt itself, so a request is refused once nothing
is left and ``max_tokens`` is cut to what is left; the last request may pass the budget by at
most its prompt.  :attr:`BackboneServer.usage` is what the worker records on the submission.

This module is Django-free; ``torch`` and ``transformers`` are imported only by the local
backend and :func:`make_tiny_model`.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import socketserver
import stat
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence
from urllib.parse import urlsplit

from qval import heap
from qval.batcher import Batcher
from qval.cpu_share import ThreadGovernor
from qval.prefix_cache import Block, PrefixCache
from qval.vllm import ServeSpec, VLLMManager

log = logging.getLogger(__name__)

SOCKET_IN_CONTAINER = "/run/qval/backbone.sock"
"""Where a container finds the backbone (also in its ``QVAL_BACKBONE_SOCKET`` variable)."""

MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_TOP_LOGPROBS = 20
DEFAULT_MAX_TOKENS = 256
DEFAULT_MAX_BATCH = 32
"""The most requests :class:`TransformersBackend` decodes together unless its entry says (``max_batch``), and so the
requests a method's client sends at once (:data:`qval.methods.llm.DEFAULT_CONCURRENCY`)."""


class BackboneError(RuntimeError):
    """A request the backbone refuses; ``status`` and ``code`` go into the OpenAI-style error body."""

    def __init__(self, status: int, message: str, code: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.param = status, code, param

    def body(self) -> dict[str, Any]:
        kind = {429: "insufficient_quota", 404: "not_found_error"}.get(self.status, "invalid_request_error")
        return {"error": {"message": str(self), "type": kind, "code": self.code, "param": self.param}}


# -- backends --------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenLogprob:
    """One token with its log-probability and the most likely alternatives at its position."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    token_id: int | None = None


@dataclass(frozen=True)
class ChatTemplate:
    """How a chat is turned into a prompt: vLLM's ``add_generation_prompt`` and ``continue_final_message``."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False


DEFAULT_TEMPLATE = ChatTemplate()


@dataclass(frozen=True)
class Generation:
    """What a backend produced for one prompt."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" or "length"
    logprobs: tuple[TokenLogprob, ...] = ()  # of the completion's tokens, when asked for
    prompt_logprobs: tuple[TokenLogprob, ...] = ()  # of the prompt's tokens (echo), when asked for


@dataclass(frozen=True)
class Sampling:
    """Decoding settings of a request."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    top_logprobs: int | None = None  # None: no logprobs; k: the token's logprob and k alternatives
    echo: bool = False


class Backend(Protocol):
    """A model behind the socket."""

    name: str

    def count_prompt(self, messages: Sequence[dict[str, str]] | None, prompt: str | None,
                     template: ChatTemplate = DEFAULT_TEMPLATE) -> int | None:
        """Prompt tokens of a chat (``messages``) or plain ``prompt`` request; None when unknown."""

    def generate(self, messages: Sequence[dict[str, str]] | None, prompt: str | None, sampling: Sampling,
                 template: ChatTemplate = DEFAULT_TEMPLATE) -> Generation:
        """Complete a chat or a prompt (``sampling.echo``: with the prompt's own token logprobs)."""


class _Sequence:
    """One request in :meth:`TransformersBackend._generate_batch`: its prompt, settings and what it has decoded."""

    def __init__(self, ids: list[int], sampling: Sampling, generator: Any, eos: int | None) -> None:
        self.ids, self.sampling, self.generator, self.eos = ids, sampling, generator, eos
        self.generated: list[int] = []
        self.logprobs: list[TokenLogprob] = []
        self.prompt_logprobs: tuple[TokenLogprob, ...] = ()
        self.finish = "length"
        self.cache: Any = None
        self.done = sampling.max_tokens == 0

    def append(self, token: int) -> None:
        """Add a decoded token; done at the end token or at ``max_tokens``."""
        self.generated.append(token)
        if token == self.eos:
            self.finish, self.done = "stop", True
        elif len(self.generated) >= self.sampling.max_tokens:
            self.done = True

    def result(self, tokenizer: Any) -> Generation:
        """The finished request as a :class:`Generation` (stop strings applied)."""
        text_ids = self.generated[:-1] if self.finish == "stop" else self.generated
        text, stopped = _apply_stop(tokenizer.decode(text_ids, skip_special_tokens=True), self.sampling.stop)
        return Generation(text=text, prompt_tokens=len(self.ids), completion_tokens=len(self.generated),
                          finish_reason="stop" if stopped else self.finish, logprobs=tuple(self.logprobs),
                          prompt_logprobs=self.prompt_logprobs)


class TransformersBackend:
    """A causal language model from a local checkpoint (never downloaded).

    ``path`` is a checkpoint directory (``config.json`` and weights), or with ``gguf_file`` the
    directory holding that GGUF file (e.g. :mod:`qval.smollm2`'s), whose weights are de-quantised to
    float32 (``transformers`` reads it with the ``gguf`` package) once per machine and then read from
    :mod:`qval.model_cache`.  ``path`` may also be the ``.gguf`` file itself.  ``sha256``: the GGUF
    file's expected digest, checked before loading (:class:`qval.smollm2.ModelFileError` on a mismatch).

    Chat prompts use the tokenizer's chat template.  Logprobs are the model's own
    log-softmax (before temperature).  Concurrent requests are decoded together (:mod:`qval.batcher`, at
    most ``max_batch`` at once): each prompt is read on its own (a batch's in token order, so that prompts that
    begin alike follow each other), in blocks of ``block`` tokens at fixed offsets, after the longest run of kept
    blocks it starts with (:mod:`qval.prefix_cache`, ``prefixes`` blocks kept: the same floats as a prompt read
    whole), then the sequences still going are decoded as one batch, left-padded, in a cache allocated once for
    the whole decode (:mod:`qval.decode_cache`), each with its own sampling settings and seed.  A batch's float
    sums are not those of a sequence decoded alone, so a generated token's logprob may differ from a lone
    request's in its last digits.  ``trim_heap``: after each batch, give what it freed back to the system
    (:mod:`qval.heap`; without it a CPU server's memory grows with the batches it serves).  ``threads``: torch's
    CPU threads on a CPU device, a number, or ``"auto"``: the cores the machine's other processes leave idle,
    measured about once a second while decoding (:mod:`qval.cpu_share`).
    """

    def __init__(self, path: str | Path, name: str | None = None, device: str | None = None, *,
                 gguf_file: str | None = None, sha256: str | None = None, max_batch: int = DEFAULT_MAX_BATCH,
                 prefixes: int = 64, block: int = 128, trim_heap: bool = True, threads: int | str = "auto") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(path)
        if gguf_file is None and path.suffix == ".gguf" and path.is_file():
            path, gguf_file = path.parent, path.name
        self.name = name or (Path(gguf_file).stem if gguf_file else path.name)
        load: dict[str, Any] = {"local_files_only": True}
        if gguf_file is not None:
            from qval.model_cache import converted
            from qval.smollm2 import check_digest, file_sha256

            if not (path / gguf_file).is_file():
                raise FileNotFoundError(f"{path / gguf_file}: no such GGUF checkpoint file")
            if sha256:
                check_digest(path / gguf_file, sha256)
            try:
                path = converted(path, gguf_file, sha256 or file_sha256(path / gguf_file))
            except OSError as exc:  # no cache this process may write: the file itself, de-quantised on load
                log.warning("%s: its conversion cannot be kept (%s); reading the GGUF file itself", gguf_file, exc)
                load.update(gguf_file=gguf_file, dtype=torch.float32)
        elif not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model checkpoint directory (no config.json)")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(path, **{k: v for k, v in load.items() if k != "dtype"})
        self.model = AutoModelForCausalLM.from_pretrained(path, **load).to(self.device).eval()
        self._lock = threading.Lock()
        self.batcher: Batcher[tuple[list[int], Sampling], Generation] = Batcher(self._generate_batch,
                                                                               max_batch=max_batch)
        self.prefixes = PrefixCache(prefixes, block)
        self.trim_heap = trim_heap
        # torch's CPU threads while this model runs (the process's own count restored after each batch): fixed,
        # or the governor's, which follows the machine's idle cores
        self.governor: ThreadGovernor | None = None
        self._fixed_threads: int | None = None
        if self.device == "cpu":
            if threads == "auto":
                self.governor = ThreadGovernor(torch.set_num_threads, torch.get_num_threads())
            else:
                self._fixed_threads = _thread_count(threads)

    def _prompt_ids(self, messages: Sequence[dict[str, str]] | None, prompt: str | None,
                    template: ChatTemplate = DEFAULT_TEMPLATE) -> list[int]:
        if messages is not None:
            ids = self.tokenizer.apply_chat_template(
                list(messages), add_generation_prompt=template.add_generation_prompt,
                continue_final_message=template.continue_final_message, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer releases
                ids = ids["input_ids"]
            return list(ids)
        return list(self.tokenizer(prompt or "", add_special_tokens=True)["input_ids"])

    def count_prompt(self, messages: Sequence[dict[str, str]] | None, prompt: str | None,
                     template: ChatTemplate = DEFAULT_TEMPLATE) -> int | None:
        return len(self._prompt_ids(messages, prompt, template))

    def _token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def _logprob_entry(self, logprobs_row: Any, token_id: int, k: int) -> TokenLogprob:
        import torch

        top: tuple[tuple[str, float], ...] = ()
        if k:
            values, indices = torch.topk(logprobs_row, min(k, logprobs_row.shape[-1]))
            top = tuple((self._token(int(i)), float(v)) for v, i in zip(values, indices))
        return TokenLogprob(self._token(token_id), float(logprobs_row[token_id]), top, token_id)

    def generate(self, messages: Sequence[dict[str, str]] | None, prompt: str | None, sampling: Sampling,
                 template: ChatTemplate = DEFAULT_TEMPLATE) -> Generation:
        ids = self._prompt_ids(messages, prompt, template)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit and len(ids) + sampling.max_tokens > limit:
            raise BackboneError(400, f"the prompt ({len(ids)} tokens) plus max_tokens ({sampling.max_tokens}) exceeds the "
                                     f"model's context of {limit} tokens", code="context_length_exceeded")
        return self.batcher.submit((ids, sampling))

    def _generate_batch(self, requests: Sequence[tuple[list[int], Sampling]]) -> list[Generation]:
        """Each request's prompt read alone, then the sequences still going decoded together (class docstring)."""
        import torch

        # read in token order: prompts that begin alike (one state's candidates) follow each other, so each
        # finds the one before it in the prefix store however many other prompts the batch holds
        order = sorted(range(len(requests)), key=lambda i: requests[i][0])
        with self._lock, torch.no_grad(), self._cpu_threads():
            read = {}
            for i in order:
                self._share_cpu()
                read[i] = self._prefill(*requests[i])
            rows = [read[i] for i in range(len(requests))]
            live = [read[i] for i in order if not read[i].done]
            if live:
                self._decode(live)
            if self.trim_heap:  # the decode cache and activations are gone now
                heap.trim()
        return [row.result(self.tokenizer) for row in rows]

    def _prefill(self, ids: list[int], sampling: Sampling) -> "_Sequence":
        """One prompt read in blocks, after the longest run of kept blocks it starts with
        (:mod:`qval.prefix_cache`): its prompt logprobs (echo) and its first token; its new whole blocks kept."""
        import torch
        from transformers import DynamicCache

        row = _Sequence(ids, sampling, torch.Generator(device=self.device).manual_seed(sampling.seed),
                        self.tokenizer.eos_token_id)
        k = sampling.top_logprobs or 0
        kept = self.prefixes.find(ids, k if sampling.echo else None)
        block, start = self.prefixes.block, len(kept) * self.prefixes.block
        past = DynamicCache()
        for i in range(len(kept[0].layers) if kept else 0):
            past.update(torch.cat([b.layers[i][0] for b in kept], dim=-2),
                        torch.cat([b.layers[i][1] for b in kept], dim=-2), i)
        chunks = []
        for at in range(start, len(ids), block):  # fixed block offsets: the same floats, kept or not
            out = self.model(torch.tensor([ids[at:at + block]], device=self.device), past_key_values=past,
                             use_cache=True, logits_to_keep=0 if sampling.echo else 1)
            past = out.past_key_values
            if sampling.echo:
                chunks.append(out.logits[0].float().log_softmax(-1))
        if sampling.echo:
            logits = torch.cat(chunks)
            row.prompt_logprobs = ((TokenLogprob(self._token(ids[0]), float("nan"), (), ids[0]),)
                                   + tuple(lp for b in kept for lp in b.logprobs or ())
                                   + tuple(self._logprob_entry(logits[i - 1 - start], ids[i], k)
                                           for i in range(start + 1, len(ids))))
        if self.prefixes.size > 0:
            new = [Block(tuple((layer.keys[:, :, j * block:(j + 1) * block].clone(),
                                layer.values[:, :, j * block:(j + 1) * block].clone()) for layer in past.layers),
                         row.prompt_logprobs[j * block + 1:(j + 1) * block + 1] if sampling.echo else None, k)
                   for j in range(len(kept), self.prefixes.usable(ids))]
            self.prefixes.add(ids, kept + new)
        if sampling.max_tokens > 0:
            self._take([row], out.logits[:, -1])
        row.cache = None if row.done else past
        return row

    def _decode(self, live: list["_Sequence"]) -> None:
        """Decode ``live`` (each holding its prompt's cache) one token a step until each has stopped, left-padded
        in one cache for the whole decode; a stopped sequence leaves the batch."""
        import torch

        from qval.decode_cache import decode_cache

        width = max(len(row.ids) for row in live)
        cache = decode_cache([[(layer.keys, layer.values) for layer in row.cache.layers] for row in live],
                             width + max(row.sampling.max_tokens for row in live))
        for row in live:
            row.cache = None
        mask = None if len(live) == 1 else torch.tensor(
            [[0] * (width - len(row.ids)) + [1] * len(row.ids) for row in live], device=self.device)
        position = torch.tensor([[len(row.ids)] for row in live], device=self.device)
        while live:
            self._share_cpu()
            tokens = torch.tensor([[row.generated[-1]] for row in live], device=self.device)
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
            out = self.model(tokens, attention_mask=mask, position_ids=position, past_key_values=cache, use_cache=True)
            self._take(live, out.logits[:, -1])
            keep = [i for i, row in enumerate(live) if not row.done]
            if len(keep) < len(live) and keep:
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                position = position[index]
                mask = mask[index] if mask is not None else None
            live = [live[i] for i in keep]
            position = position + 1

    @contextmanager
    def _cpu_threads(self) -> Iterator[None]:
        """On a CPU: torch's threads set to this model's (``threads``) for the block, the process's own count
        restored after it (a worker's training runs keep theirs)."""
        import torch

        wanted = self.governor.threads if self.governor is not None else self._fixed_threads
        if wanted is None:
            yield
            return
        own = torch.get_num_threads()
        torch.set_num_threads(wanted)
        try:
            yield
        finally:
            torch.set_num_threads(own)

    def _share_cpu(self) -> None:
        """On a CPU with ``threads="auto"``: the threads the machine leaves idle now (:mod:`qval.cpu_share`)."""
        if self.governor is not None:
            self.governor.tick()

    def _take(self, rows: Sequence["_Sequence"], logits: Any) -> None:
        """Choose each row's next token from its row of ``logits`` (and record its logprobs when asked).

        Every row's token is chosen on the device (its own sampling settings and generator) before any is read
        back, in one transfer: reading each alone would make a GPU wait for the host at every row of every step.
        """
        import torch

        logits = logits.float()
        tokens = torch.stack([self._choose(logits[i], row.sampling, row.generator)
                              for i, row in enumerate(rows)]).tolist()
        for i, (row, token) in enumerate(zip(rows, tokens)):
            if row.sampling.top_logprobs is not None:
                row.logprobs.append(self._logprob_entry(logits[i].log_softmax(-1), token, row.sampling.top_logprobs))
            row.append(token)

    def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """Mean-pooled last hidden layer of each text (its tokens, special ones included); and the tokens read."""
        import torch

        vectors, tokens = [], 0
        with self._lock, torch.no_grad(), self._cpu_threads():
            for text in texts:
                self._share_cpu()
                ids = self.tokenizer(text, add_special_tokens=True)["input_ids"] or [self.tokenizer.eos_token_id]
                tokens += len(ids)
                hidden = self.model(torch.tensor([ids], device=self.device), output_hidden_states=True).hidden_states[-1]
                vectors.append(hidden[0].float().mean(0).cpu().tolist())
        return vectors, tokens

    @staticmethod
    def _choose(logits: Any, sampling: Sampling, gen: Any) -> Any:
        """The next token of one row of ``logits``, as a 0-d tensor on their device (not read back)."""
        import torch

        if sampling.temperature <= 0:
            return torch.argmax(logits)
        probs = (logits / sampling.temperature).softmax(-1)
        if sampling.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            keep = sorted_probs.cumsum(-1) - sorted_probs < sampling.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        return torch.multinomial(probs / probs.sum(), 1, generator=gen)[0]


def _thread_count(threads: int | str) -> int:
    """A fixed count of CPU threads, checked: a positive whole number (``"auto"`` is handled by the caller)."""
    try:
        count = int(threads)
    except (TypeError, ValueError):
        count = 0
    if count < 1:
        raise ValueError(f"threads must be 'auto' or a whole number of at least 1, got {threads!r}")
    return count


def _apply_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class UpstreamBackend:
    """An OpenAI-compatible server (``vllm serve MODEL`` on the GPU worker) reached over HTTP.

    Requests are forwarded with ``model`` set to ``model``; token counts come from the
    server's ``usage``.  The prompt is not counted before forwarding (:meth:`count_prompt`
    returns None), so the budget check happens on what is left.
    """

    def __init__(self, url: str, model: str, name: str | None = None, timeout_s: float = 600.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream url must look like http://host:port, got {url!r}")
        self.host, self.port, self.base = parts.hostname, parts.port or 80, parts.path.rstrip("/")
        self.model = model
        self.name = name or model
        self.timeout_s = timeout_s

    def count_prompt(self, messages: Sequence[dict[str, str]] | None, prompt: str | None,
                     template: ChatTemplate = DEFAULT_TEMPLATE) -> int | None:
        return None

    def generate(self, messages: Sequence[dict[str, str]] | None, prompt: str | None, sampling: Sampling,
                 template: ChatTemplate = DEFAULT_TEMPLATE) -> Generation:
        body: dict[str, Any] = {"model": self.model, "max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
                                "top_p": sampling.top_p, "seed": sampling.seed}
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if messages is not None:
            path, body["messages"] = "/v1/chat/completions", list(messages)
            if sampling.top_logprobs is not None:
                body.update(logprobs=True, top_logprobs=sampling.top_logprobs)
            if template != DEFAULT_TEMPLATE:
                body.update(add_generation_prompt=template.add_generation_prompt,
                            continue_final_message=template.continue_final_message)
            if sampling.echo:
                body["prompt_logprobs"] = sampling.top_logprobs or 0
        else:
            path, body["prompt"] = "/v1/completions", prompt or ""
            if sampling.top_logprobs is not None:
                body["logprobs"] = sampling.top_logprobs
            if sampling.echo:
                body["echo"] = True
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request("POST", self.base + path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            payload = json.loads(resp.read() or b"{}")
        except (OSError, ValueError) as exc:
            raise BackboneError(502, f"the model server did not answer: {exc}", code="upstream_unavailable") from exc
        finally:
            conn.close()
        if resp.status != 200:
            message = (payload.get("error") or {}).get("message") if isinstance(payload, dict) else None
            raise BackboneError(resp.status if resp.status < 500 else 502, message or f"model server status {resp.status}",
                                code="upstream_error")
        choice, usage = payload["choices"][0], payload.get("usage") or {}
        if messages is not None:
            text = choice["message"]["content"] or ""
            entries = tuple(TokenLogprob(e["token"], e["logprob"], tuple((t["token"], t["logprob"]) for t in e.get("top_logprobs", [])))
                            for e in ((choice.get("logprobs") or {}).get("content") or []))
            prompt_entries = tuple(_prompt_entry(e) for e in (payload.get("prompt_logprobs") or []))
        else:
            text = choice["text"]
            lp = choice.get("logprobs") or {}
            tops = lp.get("top_logprobs") or [None] * len(lp.get("tokens") or [])
            all_entries = tuple(TokenLogprob(t, v if v is not None else float("nan"), tuple((top or {}).items()))
                                for t, v, top in zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], tops))
            n_prompt = int(usage.get("prompt_tokens", 0)) if sampling.echo else 0
            prompt_entries, entries = all_entries[:n_prompt], all_entries[n_prompt:]
            if sampling.echo:
                text = text[len(prompt or ""):] if text.startswith(prompt or "") else text
        return Generation(text=text, prompt_tokens=int(usage.get("prompt_tokens", 0)),
                          completion_tokens=int(usage.get("completion_tokens", 0)),
                          finish_reason=choice.get("finish_reason") or "stop", logprobs=entries, prompt_logprobs=prompt_entries)


def _prompt_entry(entry: dict[str, Any] | None) -> TokenLogprob:
    """One vLLM ``prompt_logprobs`` entry (``None`` for the first token) as the prompt token's logprob.

    With k = 0 the entry holds the prompt's own token only; with k > 0 vLLM adds the k most likely
    tokens, and the prompt's own token is the first entry it lists.
    """
    if not entry:
        return TokenLogprob("", float("nan"))
    token_id, info = next(iter(entry.items()))
    return TokenLogprob(info.get("decoded_token") or "", float(info["logprob"]), (), int(token_id))


SERVING_KEYS = ("device", "max_batch", "prefixes", "threads")
"""The keys of a ``transformers`` entry that say how its model is served (:func:`serving_options`)."""


def serving_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    """:class:`TransformersBackend`'s keyword arguments from a ``transformers`` entry's :data:`SERVING_KEYS`:
    ``device``, ``max_batch`` and ``prefixes`` where given, and ``threads``, by default the
    ``QVAL_GPU_WORKER_THREADS`` environment variable's, else ``"auto"``.  The worker's model server for
    containers (:func:`backend_from_spec`) and the one a run serves itself (:func:`qval.methods.llm.open_backbone`)
    read the entry alike."""
    options: dict[str, Any] = {key: int(spec[key]) for key in ("max_batch", "prefixes") if key in spec}
    return options | {"device": spec.get("device"),
                      "threads": spec.get("threads", os.environ.get("QVAL_GPU_WORKER_THREADS", "auto"))}


def backend_from_spec(name: str, spec: Mapping[str, Any], vllm: VLLMManager | None = None) -> Backend:
    """A backend from a ``QVAL_BACKBONES`` entry: the one place that dispatches on its ``kind``.

    ``{"kind": "transformers", "path": DIR}`` (optional ``gguf_file``: a GGUF file in ``DIR``, with optional
    ``sha256``, its digest checked before loading: :func:`qval.smollm2.backbone_spec`; and how it is served,
    :func:`serving_options`: ``device``; ``max_batch``, the most requests decoded together, wider on a GPU;
    ``prefixes``, the prompt blocks kept; ``threads``, torch's CPU threads, a number or ``"auto"``),
    ``{"kind": "upstream", "url": "http://127.0.0.1:8001", "model": NAME}``, or
    ``{"kind": "vllm", "path": DIR, ...}`` (:meth:`qval.vllm.ServeSpec.from_setting`): the ``vllm serve``
    process of the worker's manager ``vllm``, started (or restarted) now if it is not healthy, and
    forwarded to as an upstream server.
    """
    kind = spec.get("kind")
    if kind == "transformers":
        return TransformersBackend(spec["path"], name=name, gguf_file=spec.get("gguf_file"), sha256=spec.get("sha256"),
                                   **serving_options(spec))
    if kind == "upstream":
        return UpstreamBackend(spec["url"], spec["model"], name=name)
    if kind == "vllm":
        if vllm is None:
            raise ValueError(f"backbone {name!r}: kind 'vllm' is served by a worker that manages vllm servers")
        serve = ServeSpec.from_setting(name, spec)
        server = vllm.ensure(serve)
        return UpstreamBackend(f"http://{server.host}:{server.port}", serve.served_model_name, name=name)
    raise ValueError(f"backbone {name!r}: kind must be 'transformers', 'upstream' or 'vllm', got {kind!r}")


class Backends:
    """The backends one worker process serves (a local gpu worker's, a remote worker's): each entry's backend
    built once (a model is large) by :func:`backend_from_spec`, except a ``vllm`` one, asked of the manager
    at every use so that a server that died is started again."""

    def __init__(self, vllm: VLLMManager | None = None) -> None:
        self.vllm = vllm
        self._built: dict[tuple[str, str], Backend] = {}

    def get(self, name: str, spec: Mapping[str, Any]) -> Backend:
        """The backend of entry ``spec`` of ``QVAL_BACKBONES[name]``."""
        if spec.get("kind") == "vllm":
            return backend_from_spec(name, spec, self.vllm)
        key = (name, json.dumps(spec, sort_keys=True, default=str))
        if key not in self._built:
            self._built[key] = backend_from_spec(name, spec)
        return self._built[key]


# -- the budget ------------------------------------------------------------------------
@dataclass
class Usage:
    """Token use of one job (what the worker stores on the submission)."""

    budget: int
    requests: int = 0
    refused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        """The counts as plain JSON."""
        return {"budget": self.budget, "requests": self.requests, "refused": self.refused,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens}


# -- the HTTP server -------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_UnixServer | _TCPServer"

    def address_string(self) -> str:  # a Unix socket peer has no address
        return "unix" if isinstance(self.client_address, (str, bytes)) else super().address_string()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("backbone %s: " + format, self.address_string(), *args)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        owner: BackboneServer = self.server.owner
        if self.path.rstrip("/") == "/health":  # as vLLM answers it: 200 once the model is loaded
            self._send(200, {"status": "ok"})
        elif self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": owner.backend.name, "object": "model", "owned_by": "qval"}]})
        else:
            self._send(404, BackboneError(404, f"no such endpoint: GET {self.path}", code="unknown_url").body())

    def do_POST(self) -> None:  # noqa: N802
        owner: BackboneServer = self.server.owner
        try:
            length = int(self.headers.get("Content-Length") or -1)
            if length < 0:
                raise BackboneError(411, "send a Content-Length header")
            if length > MAX_REQUEST_BYTES:
                raise BackboneError(413, f"the request body is {length} bytes; the limit is {MAX_REQUEST_BYTES}")
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except ValueError as exc:
                raise BackboneError(400, f"the request body is not JSON: {exc}") from exc
            if not isinstance(body, dict):
                raise BackboneError(400, "the request body must be a JSON object")
            route = self.path.split("?")[0].rstrip("/")
            if route == "/v1/chat/completions":
                self._send(200, owner.chat(body))
            elif route == "/v1/completions":
                self._send(200, owner.complete(body))
            elif route == "/v1/embeddings":
                self._send(200, owner.embeddings(body))
            else:
                raise BackboneError(404, f"no such endpoint: POST {self.path}", code="unknown_url")
        except BackboneError as exc:
            self._send(exc.status, exc.body())
        except Exception as exc:  # noqa: BLE001 - the container gets a 500, the worker's log the trace
            log.exception("backbone request failed")
            self._send(500, BackboneError(500, f"internal error in the model server: {type(exc).__name__}",
                                          code="internal_error").body())


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # connections waiting to be accepted; a client of a Unix socket that finds the
    # queue full gets EAGAIN at once instead of waiting (socketserver's default, 5, refused a method's 8th request)

    def __init__(self, path: str, owner: "BackboneServer") -> None:
        self.owner = owner
        super().__init__(path, _Handler)


class _TCPServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: "BackboneServer") -> None:
        self.owner = owner
        super().__init__(address, _Handler)


class BackboneServer:
    """Serve ``backend`` on a Unix socket (``socket_path``) or, for local use, a TCP ``address``.

    Use as a context manager; the socket file is made connectable by any user (the
    container runs as an unprivileged user) and removed on exit.
    """

    def __init__(self, backend: Backend, budget: int, *, socket_path: str | Path | None = None,
                 address: tuple[str, int] | None = None) -> None:
        if (socket_path is None) == (address is None):
            raise ValueError("give exactly one of socket_path and address")
        if budget < 0:
            raise ValueError("the token budget cannot be negative")
        self.backend = backend
        self.usage = Usage(budget=budget)
        self.socket_path = Path(socket_path) if socket_path is not None else None
        self._address = address
        self._server: _UnixServer | _TCPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The TCP address served (after :meth:`start`)."""
        assert isinstance(self._server, _TCPServer)
        return self._server.server_address[:2]  # type: ignore[return-value]

    def start(self) -> "BackboneServer":
        """Bind and serve in a background thread."""
        if self.socket_path is not None:
            if len(str(self.socket_path).encode()) > 104:
                raise ValueError(f"socket path too long for AF_UNIX: {self.socket_path}")
            self.socket_path.parent.mkdir(parents=True, exist_ok=True)
            self.socket_path.unlink(missing_ok=True)
            self._server = _UnixServer(str(self.socket_path), self)
            os.chmod(self.socket_path, 0o666)
            os.chmod(self.socket_path.parent, 0o755)
        else:
            assert self._address is not None
            self._server = _TCPServer(self._address, self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="qval-backbone", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and remove the socket file."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> "BackboneServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- request handling --------------------------------------------------------------
    def _sampling(self, body: dict[str, Any], max_tokens: int, top_logprobs: int | None, echo: bool) -> Sampling:
        if body.get("stream"):
            raise BackboneError(400, "stream is not supported; send stream=false", param="stream")
        if int(body.get("n", 1) or 1) != 1:
            raise BackboneError(400, "n must be 1", param="n")
        stop = body.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        if not all(isinstance(s, str) for s in stop) or len(stop) > 4:
            raise BackboneError(400, "stop must be a string or a list of at most 4 strings", param="stop")
        try:
            temperature = float(1.0 if body.get("temperature") is None else body["temperature"])
            top_p = float(1.0 if body.get("top_p") is None else body["top_p"])
            seed = int(body.get("seed") or 0)
        except (TypeError, ValueError) as exc:
            raise BackboneError(400, f"temperature, top_p and seed must be numbers: {exc}") from exc
        if not 0 <= temperature <= 2:
            raise BackboneError(400, f"temperature must be between 0 and 2, got {temperature}", param="temperature")
        if not 0 < top_p <= 1:
            raise BackboneError(400, f"top_p must be in (0, 1], got {top_p}", param="top_p")
        return Sampling(max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, stop=stop,
                        top_logprobs=top_logprobs, echo=echo)

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model not in (None, "", self.backend.name):
            raise BackboneError(404, f"model {model!r} is not served here; this job's backbone is {self.backend.name!r}",
                                code="model_not_found", param="model")

    def _max_tokens(self, body: dict[str, Any], default: int, minimum: int) -> int:
        raw = body.get("max_completion_tokens", body.get("max_tokens"))
        if raw is None:
            return default
        if not isinstance(raw, int) or isinstance(raw, bool) or raw < minimum:
            raise BackboneError(400, f"max_tokens must be an integer >= {minimum}, got {raw!r}", param="max_tokens")
        return raw

    def _run(self, messages: list[dict[str, str]] | None, prompt: str | None, sampling: Sampling,
             template: ChatTemplate = DEFAULT_TEMPLATE) -> Generation:
        """Check the budget, generate, charge the tokens."""
        usage = self.usage
        needed = self.backend.count_prompt(messages, prompt, template)
        with usage._lock:
            usage.requests += 1
            left = usage.budget - usage.total_tokens
            if left <= 0 or (needed is not None and needed + min(1, sampling.max_tokens) > left):
                usage.refused += 1
                need = f"; this prompt needs {needed}" if needed is not None else ""
                raise BackboneError(429, f"token budget exhausted: this job may use {usage.budget} tokens and has used "
                                         f"{usage.total_tokens}{need}", code="token_budget_exceeded")
            cap = left - (needed or 0)
            usage.prompt_tokens += needed or 0  # reserve the prompt now: concurrent requests see it
        if sampling.max_tokens > cap:
            sampling = replace(sampling, max_tokens=cap)
        try:
            result = self.backend.generate(messages, prompt, sampling, template)
        except Exception:
            with usage._lock:
                usage.prompt_tokens -= needed or 0
            raise
        with usage._lock:
            usage.prompt_tokens += result.prompt_tokens - (needed or 0)
            usage.completion_tokens += result.completion_tokens
        return result

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """``/v1/chat/completions``."""
        self._check_model(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages):
            raise BackboneError(400, "messages must be a non-empty list of {\"role\": str, \"content\": str}", param="messages")
        top = None
        if body.get("logprobs"):
            top = body.get("top_logprobs") or 0
            if not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
                raise BackboneError(400, f"top_logprobs must be an integer in 0..{MAX_TOP_LOGPROBS}", param="top_logprobs")
        prompt_top = body.get("prompt_logprobs")
        if prompt_top is not None and (prompt_top != 0 or isinstance(prompt_top, bool)):
            raise BackboneError(400, "prompt_logprobs must be 0 (the prompt's own tokens) here", param="prompt_logprobs")
        template = ChatTemplate(add_generation_prompt=bool(body.get("add_generation_prompt", True)),
                                continue_final_message=bool(body.get("continue_final_message", False)))
        if template.continue_final_message and (template.add_generation_prompt or messages[-1]["role"] != "assistant"):
            raise BackboneError(400, "continue_final_message needs add_generation_prompt=false and a last message "
                                     "of role assistant", param="continue_final_message")
        sampling = self._sampling(body, self._max_tokens(body, DEFAULT_MAX_TOKENS, 1), top, echo=prompt_top is not None)
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        result = self._run(msgs, None, sampling, template)
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": result.text},
                                  "finish_reason": result.finish_reason, "logprobs": None}
        if top is not None:
            choice["logprobs"] = {"content": [
                {"token": e.token, "logprob": e.logprob, "top_logprobs": [{"token": t, "logprob": v} for t, v in e.top]}
                for e in result.logprobs]}
        envelope = self._envelope("chat.completion", choice, result)
        if prompt_top is not None:
            envelope["prompt_logprobs"] = [
                None if i == 0 else {str(e.token_id): {"logprob": e.logprob, "rank": None, "decoded_token": e.token}}
                for i, e in enumerate(result.prompt_logprobs)]
        return envelope

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """``/v1/completions``."""
        self._check_model(body)
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise BackboneError(400, "prompt must be a non-empty string (one prompt per request)", param="prompt")
        top = body.get("logprobs")
        if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= MAX_TOP_LOGPROBS):
            raise BackboneError(400, f"logprobs must be an integer in 0..{MAX_TOP_LOGPROBS}", param="logprobs")
        echo = bool(body.get("echo"))
        sampling = self._sampling(body, self._max_tokens(body, 16, 0), top, echo)
        result = self._run(None, prompt, sampling)
        choice: dict[str, Any] = {"index": 0, "text": (prompt + result.text) if echo else result.text,
                                  "finish_reason": result.finish_reason, "logprobs": None}
        if top is not None:
            entries = (result.prompt_logprobs if echo else ()) + result.logprobs
            choice["logprobs"] = {
                "tokens": [e.token for e in entries],
                "token_logprobs": [None if e.logprob != e.logprob else e.logprob for e in entries],
                "top_logprobs": [dict(e.top) if e.top else None for e in entries],
            }
        return self._envelope("text_completion", choice, result)

    def embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        """``/v1/embeddings``: mean-pooled last hidden layer; the input tokens count against the budget."""
        self._check_model(body)
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise BackboneError(400, "input must be a string or a non-empty list of strings", param="input")
        embed = getattr(self.backend, "embed", None)
        if embed is None:
            raise BackboneError(400, f"the backbone {self.backend.name} serves no embeddings here", code="unsupported")
        usage = self.usage
        with usage._lock:
            usage.requests += 1
            if usage.budget - usage.total_tokens <= 0:
                usage.refused += 1
                raise BackboneError(429, f"token budget exhausted: this job may use {usage.budget} tokens",
                                    code="token_budget_exceeded")
        vectors, tokens = embed(texts)
        with usage._lock:
            usage.prompt_tokens += tokens
        return {"object": "list", "model": self.backend.name,
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def _envelope(self, kind: str, choice: dict[str, Any], result: Generation) -> dict[str, Any]:
        return {"id": f"qval-{uuid.uuid4().hex[:16]}", "object": kind, "created": int(time.time()),
                "model": self.backend.name, "choices": [choice],
                "usage": {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                          "total_tokens": result.prompt_tokens + result.completion_tokens}}


def connect_unix(path: str | Path, timeout_s: float = 600.0) -> http.client.HTTPConnection:
    """An HTTP connection to a backbone socket (what a container does with ``QVAL_BACKBONE_SOCKET``)."""

    class _UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout_s)
            self.sock.connect(str(path))

    return _UnixConnection("localhost", timeout=timeout_s)


def is_socket(path: Path) -> bool:
    """True when ``path`` is a Unix socket."""
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


# -- a tiny real model -----------------------------------------------------------------
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def make_tiny_model(directory: str | Path, seed: int = 0, *, hidden_size: int = 32, num_layers: int = 2) -> Path:
    """Write a tiny random-weight Llama-style causal LM with a byte-level BPE tokenizer to ``directory``.

    Nothing is downloaded: the tokenizer is trained here on a small built-in text and the
    weights are drawn from ``seed``.  It speaks nonsense, but it exercises exactly the code
    path of a real checkpoint (chat template, tokenizer, generation, logprobs).  ``hidden_size``
    (a multiple of 4) and ``num_layers`` make a larger one for timings (``benchmarks/lora.py``).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specials = ["<|begin|>", "<|end|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "Yes No yes no The agent is in a state. Is the action good? Answer Yes or No.",
        "move left right up down go to take put open close the goal hole frozen lake grid",
        "click fill the button text box submit login user password enter checkbox tab",
    ] * 4
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin|>", eos_token="<|end|>",
                                        pad_token="<|pad|>")
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=num_layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory
