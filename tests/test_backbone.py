"""The backbone socket (qval.backbone): an OpenAI-compatible model server with a token budget.

A tiny random-weight Llama-style model is built locally (:func:`qval.backbone.make_tiny_model`)
and served exactly as a real checkpoint would be.  The server is checked over its Unix socket
against computations made directly with transformers, the budget is exhausted on purpose, the
upstream (vLLM-style) backend is checked against the local one, and the starter kit's backbone
method runs in a real sandboxed podman container that reaches the model only through the socket.
"""

from __future__ import annotations

import http.client
import json
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from qval import backbone as bb
from qval import containers as qc
from qval import schema
from qval.scoring import truth_from_dataset


@pytest.fixture(scope="session")
def backend(tiny_model: Path) -> bb.TransformersBackend:
    return bb.TransformersBackend(tiny_model, name="tiny-llama", device="cpu")


@pytest.fixture
def served(backend: bb.TransformersBackend, tmp_path: Path):  # type: ignore[no-untyped-def]
    with bb.BackboneServer(backend, 100_000, socket_path=tmp_path / "bb" / "backbone.sock") as server:
        yield server


def call(server: bb.BackboneServer, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, dict]:
    assert server.socket_path is not None
    conn = bb.connect_unix(server.socket_path, timeout_s=60)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


CHAT = [{"role": "system", "content": "Answer Yes or No."},
        {"role": "user", "content": "The agent is at the goal. Is the action good?"}]


def test_tiny_model_is_reproducible(tiny_model: Path, tmp_path: Path) -> None:
    again = bb.make_tiny_model(tmp_path / "again")
    assert (again / "tokenizer.json").read_bytes() == (tiny_model / "tokenizer.json").read_bytes()
    a = transformers.AutoModelForCausalLM.from_pretrained(tiny_model)
    b = transformers.AutoModelForCausalLM.from_pretrained(again)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_socket_is_connectable_by_anyone_and_removed(backend: bb.TransformersBackend, tmp_path: Path) -> None:
    path = tmp_path / "bb" / "backbone.sock"
    with bb.BackboneServer(backend, 10, socket_path=path):
        assert bb.is_socket(path)
        assert path.stat().st_mode & 0o777 == 0o666
    assert not path.exists()


def test_chat_matches_greedy_decoding_computed_directly(served: bb.BackboneServer, backend: bb.TransformersBackend) -> None:
    status, body = call(served, "POST", "/v1/chat/completions",
                        {"model": "tiny-llama", "messages": CHAT, "max_tokens": 6, "temperature": 0,
                         "logprobs": True, "top_logprobs": 3})
    assert status == 200, body
    tok, model = backend.tokenizer, backend.model
    ids = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    # Greedy decoding without a cache, one full forward pass per token: an independent computation.
    seq, expected_lp = list(ids), []
    with torch.no_grad():
        for _ in range(6):
            logprobs = model(torch.tensor([seq])).logits[0, -1].float().log_softmax(-1)
            nxt = int(torch.argmax(logprobs))
            expected_lp.append(float(logprobs[nxt]))
            seq.append(nxt)
            if nxt == tok.eos_token_id:
                break
    generated = seq[len(ids):]
    assert body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": len(generated),
                             "total_tokens": len(ids) + len(generated)}
    text_ids = generated[:-1] if generated[-1] == tok.eos_token_id else generated
    assert body["choices"][0]["message"]["content"] == tok.decode(text_ids, skip_special_tokens=True)
    content = body["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in content] == pytest.approx(expected_lp, abs=1e-4)
    for entry in content:  # top alternatives sorted, the chosen (greedy) token first
        tops = [t["logprob"] for t in entry["top_logprobs"]]
        assert tops == sorted(tops, reverse=True) and len(tops) == 3
        assert entry["logprob"] == pytest.approx(tops[0], abs=1e-6)
    assert body["model"] == "tiny-llama"
    assert served.usage.total_tokens == body["usage"]["total_tokens"] and served.usage.requests == 1


def test_echo_logprobs_score_a_text_like_a_forward_pass(served: bb.BackboneServer, backend: bb.TransformersBackend) -> None:
    prompt = "move left to the goal"
    status, body = call(served, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 0})
    assert status == 200, body
    ids = backend.tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        logprobs = backend.model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    expected = [None] + [float(logprobs[i - 1, ids[i]]) for i in range(1, len(ids))]
    got = body["choices"][0]["logprobs"]["token_logprobs"]
    assert got[0] is None and got[1:] == pytest.approx(expected[1:], abs=1e-4)
    assert body["choices"][0]["text"] == prompt
    assert body["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}


def test_continue_final_message_prompt_logprobs_score_a_reply_like_a_forward_pass(
        served: bb.BackboneServer, backend: bb.TransformersBackend, tmp_path: Path) -> None:
    """vLLM's extensions the built-in logprob methods use: the assistant reply's tokens scored in place,
    the same through the upstream (vLLM) path."""
    messages = CHAT + [{"role": "assistant", "content": "Yes"}]
    req = {"messages": messages, "max_tokens": 1, "temperature": 0, "add_generation_prompt": False,
           "continue_final_message": True, "prompt_logprobs": 0}
    status, body = call(served, "POST", "/v1/chat/completions", req)
    assert status == 200, body
    ids = backend.tokenizer.apply_chat_template(messages, continue_final_message=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert backend.tokenizer.decode(ids).endswith("<|assistant|>\nYes")
    with torch.no_grad():
        logprobs = backend.model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    got = body["prompt_logprobs"]
    assert got[0] is None and len(got) == len(ids)
    assert [next(iter(e)) for e in got[1:]] == [str(i) for i in ids[1:]]
    assert [next(iter(e.values()))["logprob"] for e in got[1:]] == pytest.approx(
        [float(logprobs[i - 1, ids[i]]) for i in range(1, len(ids))], abs=1e-4)
    status, bad = call(served, "POST", "/v1/chat/completions", {**req, "add_generation_prompt": True})
    assert status == 400 and "continue_final_message" in bad["error"]["message"]
    with bb.BackboneServer(backend, 10**6, address=("127.0.0.1", 0)) as upstream:
        host, port = upstream.address
        proxy = bb.UpstreamBackend(f"http://{host}:{port}", "tiny-llama")
        result = proxy.generate(messages, None, bb.Sampling(max_tokens=1, temperature=0, echo=True),
                                bb.ChatTemplate(add_generation_prompt=False, continue_final_message=True))
        assert [e.logprob for e in result.prompt_logprobs[1:]] == pytest.approx(
            [next(iter(e.values()))["logprob"] for e in got[1:]], abs=1e-6)


def test_sampling_is_seeded(served: bb.BackboneServer) -> None:
    req = {"prompt": "click the button", "max_tokens": 12, "temperature": 1.5}
    outs = [call(served, "POST", "/v1/completions", {**req, "seed": s})[1]["choices"][0]["text"] for s in (1, 1, 2, 3, 4)]
    assert outs[0] == outs[1]
    assert len(set(outs[1:])) > 1  # different seeds sample differently (4 draws of 12 tokens from ~400)


def test_concurrent_requests_are_decoded_together_and_answered_as_if_alone(
        served: bb.BackboneServer, backend: bb.TransformersBackend) -> None:
    """Requests sent at once share decoding steps (fewer batches than requests) and get what each gets alone:
    prompts of different lengths (left-padded), greedy and seeded sampling, different ``max_tokens``, logprobs,
    a prompt echo (scored by its own forward pass) and a stop string."""
    from concurrent.futures import ThreadPoolExecutor

    requests = []
    for i in range(12):
        chat = [CHAT[0], {"role": "user", "content": "The agent moved left. " * (1 + 3 * i) + "Is the action good?"}]
        body: dict[str, Any] = {"messages": chat, "max_tokens": 4 + 3 * (i % 4), "temperature": 0 if i % 2 else 1.2,
                                "seed": i}
        if i % 3 == 0:
            body.update(logprobs=True, top_logprobs=2)
        if i == 5:
            body["stop"] = ["e"]
        requests.append(("/v1/chat/completions", body))
    requests.append(("/v1/completions", {"prompt": "click the button " * 5, "max_tokens": 3, "echo": True,
                                         "logprobs": 1, "temperature": 0}))
    alone = [call(served, "POST", path, body) for path, body in requests]
    before = backend.batcher.batches
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(lambda r: call(served, "POST", r[0], r[1]), requests))
    assert backend.batcher.batches - before < len(requests)
    for (s1, a), (s2, b) in zip(alone, together):
        assert s1 == s2 == 200, (a, b)
        assert a["usage"] == b["usage"]
        for x, y in zip(a["choices"], b["choices"]):
            assert x.get("message", x.get("text")) == y.get("message", y.get("text"))
            assert x["finish_reason"] == y["finish_reason"]
            lx, ly = x.get("logprobs"), y.get("logprobs")
            if lx and "content" in lx:
                assert [e["logprob"] for e in lx["content"]] == pytest.approx([e["logprob"] for e in ly["content"]],
                                                                              abs=1e-4)
            elif lx:
                assert lx["tokens"] == ly["tokens"]
                assert lx["token_logprobs"][1:] == pytest.approx(ly["token_logprobs"][1:], abs=1e-4)
    assert any(b["choices"][0]["finish_reason"] == "length" for _, b in together)


def test_a_prompt_that_starts_like_one_read_before_is_read_from_where_they_differ(tiny_model: Path) -> None:
    """Echoed prompts and chats that share their beginnings: the backend that starts from prompts read before
    (qval.prefix_cache) reads fewer tokens and answers to the last digit as one that reads every prompt whole
    (both read in blocks at the same offsets)."""
    shared = "The agent is in a kitchen with a fridge, a sink and a table. " * 4
    calls = [("/v1/completions", {"prompt": shared + "It opens the fridge.", "max_tokens": 2, "echo": True,
                                  "logprobs": 0, "temperature": 0}),
             ("/v1/completions", {"prompt": shared + "It walks to the sink.", "max_tokens": 0, "echo": True,
                                  "logprobs": 0}),
             ("/v1/completions", {"prompt": shared + "It walks to the sink.", "max_tokens": 3, "echo": True,
                                  "logprobs": 2, "temperature": 0}),  # other k: the whole prompt is read
             ("/v1/chat/completions", {"messages": [{"role": "system", "content": shared},
                                                    {"role": "user", "content": "Is opening the fridge good?"}],
                                       "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 1}),
             ("/v1/chat/completions", {"messages": [{"role": "system", "content": shared},
                                                    {"role": "user", "content": "Is going to the sink good?"}],
                                       "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 1})]
    answers = []
    for prefixes in (0, 8):
        backend = bb.TransformersBackend(tiny_model, name="tiny-llama", device="cpu", prefixes=prefixes, block=16)
        with tempfile.TemporaryDirectory(prefix="qval-prefix-") as folder, \
                bb.BackboneServer(backend, 100_000, socket_path=Path(folder) / "bb.sock") as server:  # a short path
            answers.append([call(server, "POST", path, body) for path, body in calls])
        if prefixes:
            assert backend.prefixes.hits == 2  # the second prompt (k 0) and the second chat
            assert backend.prefixes.skipped >= 2 * 48
    for (s1, whole), (s2, resumed) in zip(*answers):
        assert s1 == s2 == 200, (whole, resumed)
        for answer in (whole, resumed):
            del answer["id"], answer["created"]
        assert whole == resumed


@pytest.mark.parametrize(("path", "body", "status", "needle"), [
    ("/v1/chat/completions", {"messages": CHAT, "stream": True}, 400, "stream is not supported"),
    ("/v1/chat/completions", {"messages": CHAT, "n": 2}, 400, "n must be 1"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages must be"),
    ("/v1/chat/completions", {"messages": CHAT, "model": "gpt-9"}, 404, "'gpt-9' is not served here"),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 0}, 400, "max_tokens must be an integer >= 1"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 50}, 400, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "temperature": 7}, 400, "temperature must be between 0 and 2"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt must be a non-empty string"),
    ("/v1/embeddings", {"input": 5}, 400, "input must be a string or a non-empty list of strings"),
    ("/v1/images/generations", {"prompt": "x"}, 404, "no such endpoint"),
])
def test_bad_requests_get_openai_style_errors(served: bb.BackboneServer, path: str, body: dict, status: int, needle: str) -> None:
    got, payload = call(served, "POST", path, body)
    assert got == status
    assert needle in payload["error"]["message"]
    assert served.usage.total_tokens == 0  # nothing charged


def test_malformed_json_and_models_listing(served: bb.BackboneServer) -> None:
    status, payload = call(served, "POST", "/v1/chat/completions", raw=b"{not json")
    assert status == 400 and "not JSON" in payload["error"]["message"]
    status, payload = call(served, "GET", "/v1/models")
    assert status == 200 and [m["id"] for m in payload["data"]] == ["tiny-llama"]


def test_token_budget_is_never_exceeded(backend: bb.TransformersBackend, tmp_path: Path) -> None:
    budget = 150
    with bb.BackboneServer(backend, budget, socket_path=tmp_path / "b" / "s.sock") as server:
        statuses, charged = [], 0
        for i in range(30):
            status, body = call(server, "POST", "/v1/chat/completions",
                                {"messages": [{"role": "user", "content": f"state {i}: is it good?"}], "max_tokens": 20,
                                 "temperature": 0})
            statuses.append(status)
            if status == 200:
                charged += body["usage"]["total_tokens"]
            else:
                assert status == 429, body
                assert body["error"]["code"] == "token_budget_exceeded"
                assert f"may use {budget} tokens" in body["error"]["message"]
        usage = server.usage.as_dict()
    assert 200 in statuses and 429 in statuses
    assert statuses.index(429) > 0 and all(s == 429 for s in statuses[statuses.index(429):])  # once out, always out
    assert usage["total_tokens"] == charged <= budget
    assert usage["refused"] == statuses.count(429) and usage["requests"] == 30


def test_upstream_backend_forwards_to_an_openai_server(backend: bb.TransformersBackend, tmp_path: Path) -> None:
    """The vLLM path: our socket in front of an OpenAI-compatible HTTP server (here: this module on TCP)."""
    with bb.BackboneServer(backend, 10**6, address=("127.0.0.1", 0)) as upstream:
        host, port = upstream.address
        proxy_backend = bb.backend_from_spec("tiny-llama", {"kind": "upstream", "url": f"http://{host}:{port}",
                                                            "model": "tiny-llama"})
        with bb.BackboneServer(proxy_backend, 60, socket_path=tmp_path / "p" / "s.sock") as proxy:
            req = {"messages": CHAT, "max_tokens": 5, "temperature": 0, "logprobs": True, "top_logprobs": 2}
            status, via_proxy = call(proxy, "POST", "/v1/chat/completions", req)
            assert status == 200, via_proxy
            conn = http.client.HTTPConnection(host, port)
            conn.request("POST", "/v1/chat/completions", json.dumps(req), {"Content-Type": "application/json"})
            direct = json.loads(conn.getresponse().read())
            assert via_proxy["choices"][0]["message"] == direct["choices"][0]["message"]
            assert via_proxy["choices"][0]["logprobs"] == direct["choices"][0]["logprobs"]
            assert via_proxy["usage"] == direct["usage"]
            status, echo = call(proxy, "POST", "/v1/completions", {"prompt": "go left", "max_tokens": 0, "echo": True,
                                                                   "logprobs": 0})
            assert status == 200 and echo["choices"][0]["logprobs"]["token_logprobs"][0] is None
            # Budget from the upstream's usage: requests are refused once 60 tokens are used.
            statuses = [call(proxy, "POST", "/v1/chat/completions", req)[0] for _ in range(10)]
            assert 429 in statuses
            used = proxy.usage.total_tokens
            prompt = via_proxy["usage"]["prompt_tokens"]
            assert 60 <= used < 60 + prompt + 5  # may pass the budget by at most one prompt (documented)


def test_every_kind_of_backbone_entry_is_dispatched_in_one_place(tiny_model: Path, tmp_path: Path) -> None:
    """backend_from_spec knows the three kinds; a vllm entry needs the worker's manager, an unknown kind is named;
    a transformers entry's ``max_batch`` is how many requests its server decodes together (32 when not given), its
    ``prefixes`` how many prompt blocks it keeps (64 when not given)."""
    local = {"kind": "transformers", "path": str(tiny_model), "device": "cpu"}
    default = bb.backend_from_spec("tiny", local)
    assert default.batcher.max_batch == 32 and default.prefixes.size == 64
    wider = bb.backend_from_spec("tiny", {**local, "max_batch": 128, "prefixes": 256})
    assert wider.batcher.max_batch == 128 and wider.prefixes.size == 256
    upstream = bb.backend_from_spec("up", {"kind": "upstream", "url": "http://127.0.0.1:9", "model": "m"})
    assert isinstance(upstream, bb.UpstreamBackend) and upstream.model == "m"
    with pytest.raises(ValueError, match="kind 'vllm' is served by a worker that manages vllm servers"):
        bb.backend_from_spec("big", {"kind": "vllm", "path": str(tmp_path)})
    with pytest.raises(ValueError, match="kind must be 'transformers', 'upstream' or 'vllm', got 'tgi'"):
        bb.backend_from_spec("odd", {"kind": "tgi"})
    backends = bb.Backends()
    assert backends.get("up", {"kind": "upstream", "url": "http://127.0.0.1:9", "model": "m"}) is \
        backends.get("up", {"kind": "upstream", "url": "http://127.0.0.1:9", "model": "m"})  # built once


@pytest.mark.slow
def test_a_remote_worker_serves_a_vllm_backbone_itself(tiny_model: Path, tmp_path: Path) -> None:
    """The remote gpu worker dispatches backbone kinds as a local one does: a ``kind: vllm`` entry is its
    own ``vllm serve`` process (here scripts/vllm-standin), started on first use and then reused."""
    from qval import remote_worker as rw

    standin = (sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "vllm-standin"))
    config = rw.Config(site="http://127.0.0.1:9", name="remote-test", vllm_command=standin, vllm_startup_s=300,
                       data_dir=tmp_path, backbones={"tiny": {"kind": "vllm", "path": str(tiny_model),
                                                              "served_model_name": "tiny-served"}})
    try:
        backend = rw.served_backend(config, "tiny")
        assert rw._BACKENDS is not None and rw._BACKENDS.vllm is not None
        server = rw._BACKENDS.vllm.running()["tiny"]
        assert (backend.host, backend.port, backend.model) == ("127.0.0.1", server.port, "tiny-served")
        reply = backend.generate([{"role": "user", "content": "hi"}], None, bb.Sampling(max_tokens=2))
        assert reply.completion_tokens >= 1
        assert rw.served_backend(config, "tiny").port == server.port  # reused
        assert server.log_path.parent == tmp_path / "logs"
    finally:
        rw._stop_vllm_servers()
        rw._BACKENDS = None


def test_a_checkpoint_is_loaded_once_per_process_until_its_files_change(tiny_model: Path, tmp_path: Path) -> None:
    """Every run a worker makes on one local checkpoint shares one load (a gpu worker runs 13 methods on SmolLM2);
    a checkpoint whose files changed at the same path is loaded again."""
    import shutil

    from qval.methods.llm import loaded_checkpoint, open_backbone

    model = tmp_path / "tiny-llama"
    shutil.copytree(tiny_model, model)
    loaded_checkpoint.cache_clear()
    replies = []
    for _ in range(2):
        with open_backbone(str(model), cache_dir=None) as client:
            replies.append(client.chat([{"role": "user", "content": "hi"}], max_tokens=3, temperature=0.0).text)
    assert loaded_checkpoint.cache_info().misses == 1 and loaded_checkpoint.cache_info().hits == 1
    assert replies[0] == replies[1]
    (model / "README.md").write_text("a new revision\n")
    with open_backbone(str(model), cache_dir=None):
        pass
    assert loaded_checkpoint.cache_info().misses == 2
    loaded_checkpoint.cache_clear()


def test_a_checkpoint_a_run_serves_is_served_as_its_entry_says_and_never_timed_out(tiny_model: Path,
                                                                                  monkeypatch) -> None:
    """A baseline run on a ``transformers`` entry serves the checkpoint itself (method_backbone, open_backbone): the
    entry's ``max_batch`` and ``prefixes`` reach that server, and a request there waits as long as the requests
    ahead of it take, where one to a remote server is retried after REMOTE_TIMEOUT_S (on a CPU, 32 ALFWorld
    ``ranking`` prompts took over its 600 s, and each retry made the busy server read them again)."""
    from qval.methods import llm

    entry = {"kind": "transformers", "path": str(tiny_model), "device": "cpu", "max_batch": 4, "prefixes": 3}
    spec, options, _ = llm.method_backbone("tiny", entry, None)
    assert options["serving"] == {"device": "cpu", "max_batch": 4, "prefixes": 3}
    monkeypatch.setattr(llm, "REMOTE_TIMEOUT_S", 0.001)  # shorter than any request takes
    llm.loaded_checkpoint.cache_clear()
    chat = [{"role": "user", "content": "count"}]
    with llm.open_backbone(spec, cache_dir=None, serving=options["serving"]) as client:
        backend = llm.loaded_checkpoint(Path(spec).resolve(), options["backbone_identity"],
                                        json.dumps(options["serving"], sort_keys=True))
        assert llm.loaded_checkpoint.cache_info().misses == 1  # the same backend the run is served by
        assert backend.batcher.max_batch == 4 and backend.prefixes.size == 3
        replies = client.map(lambda seed: client.chat(chat, max_tokens=12, seed=seed), list(range(6)))
        assert len(replies) == 6 and backend.batcher.items == 6  # each request read once, none retried
        with bb.BackboneServer(backend, 10**6, address=("127.0.0.1", 0)) as remote:
            host, port = remote.address
            with llm.open_backbone(f"http://{host}:{port}", cache_dir=None) as far:
                with pytest.raises(llm.LLMError, match="timed out"):
                    far.chat(chat, max_tokens=12, seed=99)
    llm.loaded_checkpoint.cache_clear()


def test_upstream_down_is_a_clear_error(tmp_path: Path) -> None:
    proxy_backend = bb.UpstreamBackend("http://127.0.0.1:9", "m", timeout_s=5)
    with bb.BackboneServer(proxy_backend, 100, socket_path=tmp_path / "d" / "s.sock") as proxy:
        status, body = call(proxy, "POST", "/v1/chat/completions", {"messages": CHAT})
        assert status == 502 and "did not answer" in body["error"]["message"]
        assert proxy.usage.total_tokens == 0


# -- in a real sandboxed container -----------------------------------------------------------
def text_only(ds: schema.Dataset) -> schema.Dataset:
    """The first 15 dev states of ``ds`` without image file names (the method reads text only)."""
    states = [replace(s, image=None, end_image=None,
                      candidates=tuple(replace(c, next_image=None, end_image=None) for c in s.candidates))
              for s in ds.states_in("dev")[:15]]
    return replace(ds, states=states, images={})


def run_kit(engine: qc.Engine, archive: Path, ds: schema.Dataset, backend: bb.Backend | None,
            budget: int) -> tuple[qc.Evaluation, dict[str, int] | None]:
    with qc.Job(engine) as job:
        image_id = job.load(archive)
        qc.write_input(ds, "dev", "q", job.input_dir)
        if backend is None:
            result = job.run(image_id, qc.Limits(timeout_s=300))
            usage = None
        else:
            with bb.BackboneServer(backend, budget, socket_path=job.backbone_socket) as server:
                result = job.run(image_id, qc.Limits(timeout_s=300), backbone=backend.name)
            usage = server.usage.as_dict()
    return qc.evaluate(result, truth_from_dataset(ds, "dev", "q"), bootstrap_resamples=0), usage


@pytest.mark.container
@pytest.mark.slow
def test_backbone_method_in_a_sandboxed_container(engine: qc.Engine, backbone_kit_tar: Path, frozenlake: schema.Dataset,
                                                  backend: bb.TransformersBackend) -> None:
    ds = text_only(frozenlake)
    points = sum(len(s.candidates) for s in ds.states)
    evaluation, usage = run_kit(engine, backbone_kit_tar, ds, backend, budget=10**7)
    assert evaluation.outcome == "finished", (evaluation.error, evaluation.run.stderr[-2000:])
    assert usage is not None and usage["requests"] == points and usage["refused"] == 0
    assert evaluation.run.metadata is not None and evaluation.run.metadata["asked"] == points
    assert evaluation.run.metadata["model"] == "tiny-llama"
    spearman = {r.metric: r.value for r in evaluation.rows}["spearman"]
    assert spearman is None or math.isfinite(spearman)  # a random model: any correlation, but scored

    # The same job with a small budget: refused part-way, the method still finishes, the budget holds.
    evaluation, usage = run_kit(engine, backbone_kit_tar, ds, backend, budget=1500)
    assert evaluation.outcome == "finished", evaluation.error
    assert usage is not None and 0 < usage["requests"] - usage["refused"] < points
    assert usage["refused"] == 1 and usage["total_tokens"] <= 1500
    assert evaluation.run.metadata["unscored_after_budget"] == points - (usage["requests"] - 1)

    # Without a backbone there is no socket in the container: the method says so and fails.
    evaluation, usage = run_kit(engine, backbone_kit_tar, ds, None, budget=0)
    assert evaluation.outcome == "failed" and evaluation.error == "exited with code 1"
    assert "no backbone" in evaluation.run.stderr


@pytest.mark.container
def test_run_refuses_a_backbone_that_is_not_served(engine: qc.Engine) -> None:
    with qc.Job(engine) as job, pytest.raises(qc.ContainerError, match="no backbone is served"):
        job.run("f" * 64, qc.Limits(), backbone="tiny-llama")


@pytest.mark.container
def test_backbone_mount_is_read_only_and_named(engine: qc.Engine) -> None:
    with qc.Job(engine) as job:
        argv = job.run_argv("n", "f" * 64, qc.Limits(), backbone="tiny-llama")
    mount = argv[argv.index(f"{job.backbone_socket.parent}:/run/qval:ro") - 1]
    assert mount == "-v"
    assert "QVAL_BACKBONE_SOCKET=/run/qval/backbone.sock" in argv and "QVAL_BACKBONE_MODEL=tiny-llama" in argv
    plain = job.run_argv("n", "f" * 64, qc.Limits())
    assert not any("/run/qval" in a for a in plain)


@pytest.mark.container
@pytest.mark.slow
def test_run_container_serves_a_local_checkpoint(engine: qc.Engine, backbone_kit_tar: Path, frozenlake: schema.Dataset,
                                                 tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from qval import cli

    monkeypatch.setenv("QVAL_CONTAINER_WORK_ROOT", str(engine.work_root))
    folder = text_only(frozenlake).write(tmp_path / "small")
    code = cli.main(["run-container", str(backbone_kit_tar), "--dataset", str(folder), "--split", "dev",
                     "--backbone", str(tiny_model), "--token-budget", "1000", "--bootstrap", "0",
                     "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 0, err
    line = next(x for x in err.splitlines() if x.startswith("backbone tiny-llama:"))
    used, budget = (int(x) for x in line.split(":")[1].split("tokens")[0].split(" of "))
    assert budget == 1000 and 0 < used <= 1000 and "(1 refused)" in line
    meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert meta["model"] == "tiny-llama" and meta["unscored_after_budget"] > 0
    code = cli.main(["run-container", str(backbone_kit_tar), "--dataset", str(folder), "--backbone", str(tmp_path)])
    assert code == 1 and "is not a model checkpoint directory" in capsys.readouterr().err
