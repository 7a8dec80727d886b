"""Built-in text methods (qval.methods) against a scripted OpenAI-compatible HTTP server, and end to end
with a tiny random chat model served by our own server."""

from __future__ import annotations

import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
import pytest

from qval import predictions as qpred
from qval import schema
from qval.methods import parsing
from qval.methods.registry import MethodError, all_methods, get_method
from qval.methods.run import run_method, write_predictions

TEXT_METHODS = ["direct-single", "direct-batched", "direct-sequential", "direct-16", "gvl", "verifier", "Δbelief",
                "codegen", "codegen-avg", "eureka", "sdpo", "sdpo-gt", "ranking"]


# -- a scripted OpenAI-compatible server ---------------------------------------------------
class Scripted:
    """A real HTTP server: ``reply(messages) -> text`` for generations and ``logprobs(messages, reply) -> [lp per
    word]`` for scored continuations (the reply is split into words, each one token)."""

    def __init__(self, reply: Callable[[list[dict[str, str]]], str] = lambda m: "",
                 logprobs: Callable[[list[dict[str, str]], str], list[float]] | None = None,
                 fail: Callable[[list[dict[str, str]]], int] = lambda m: 0) -> None:
        self.reply, self.logprobs, self.fail = reply, logprobs, fail
        self.bodies: list[dict[str, Any]] = []
        self.local = threading.local()  # .body: the request being answered in this thread
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, payload: dict[str, Any], status: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._send({"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0,
                                                        "owned_by": "test"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with threading.Lock():
                    owner.bodies.append(body)
                messages = body["messages"]
                owner.local.body = body
                status = owner.fail(messages)  # an HTTP error status, or 0
                if status:
                    self._send({"error": {"message": f"scripted failure {status}", "type": "error"}}, status)
                    return
                payload: dict[str, Any] = {
                    "id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": ""}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
                if body.get("continue_final_message"):
                    words = re.findall(r"\s*\S+", messages[-1]["content"])
                    assert owner.logprobs is not None
                    values = owner.logprobs(messages[:-1], messages[-1]["content"])
                    assert len(values) == len(words)
                    payload["prompt_logprobs"] = [None, {"7": {"logprob": -9.0, "rank": 1, "decoded_token": "<|a|>\n"}}] + [
                        {str(100 + i): {"logprob": v, "rank": 1, "decoded_token": w}} for i, (w, v) in enumerate(zip(words, values))]
                else:
                    payload["choices"][0]["message"]["content"] = owner.reply(messages)
                self._send(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted():  # type: ignore[no-untyped-def]
    servers: list[Scripted] = []

    def start(**kwargs: Any) -> Scripted:
        servers.append(Scripted(**kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def tiny_dataset(num_trajectories: int = 2, steps: int = 3) -> schema.Dataset:
    """A FrozenLake-like dataset built by hand: state observations carry a marker ``obs<t>-<s>``."""
    states, q, v = [], {}, {}
    actions = ("move left", "move down", "move right", "move up")
    for t in range(num_trajectories):
        for s in range(steps):
            sid = f"t{t}s{s}"
            cands = tuple(schema.Candidate(id=f"{sid}c{i}", state_id=sid, index=i, action=a,
                                           next_state=f"next{t}-{s}-{i}", is_actor=i == 1) for i, a in enumerate(actions))
            states.append(schema.State(id=sid, split="dev", trajectory=t, step=s, task=f"map-{t}",
                                       observation=f"obs{t}-{s}", history=actions[:1] * s, candidates=cands))
            v[sid] = 0.5
            q.update({c.id: 0.1 * (i + 1) for i, c in enumerate(cands)})
    manifest = schema.Manifest(slug="fl-tiny", name="t", version="1", environment="frozenlake", description="",
                               modalities=["text"], labelling={"discount": 0.95}, config={})
    return schema.Dataset(manifest=manifest, states=states, q_labels=q, v_labels=v)


def marker(messages: list[dict[str, str]]) -> list[str]:
    return re.findall(r"obs\d+-\d+", messages[-1]["content"])


# -- parsing ----------------------------------------------------------------------------------
def test_answer_tags_and_permutations() -> None:
    assert parsing.parse_answer("think <answer>1</answer> then <answer> -0.25 </answer>") == -0.25
    assert math.isnan(parsing.parse_answer("<answer>about 3</answer>"))
    assert math.isnan(parsing.parse_answer("0.5"))
    assert parsing.parse_numbered_answers("<answer_2>2</answer_2><answer_1>1e-1</answer_1>", 3)[:2] == [0.1, 2.0]
    assert math.isnan(parsing.parse_numbered_answers("<answer_2>2</answer_2>", 3)[2])
    assert parsing.parse_permutation("first 1, 2, 3, 4 no: 3, 1, 2, 4. Then 1, 1, 2, 3", 4) == [2, 0, 1, 3]
    assert parsing.parse_permutation("2, 1, 5", 3) is None
    assert parsing.log_yes_probability([-1.0], [-2.0]) == pytest.approx(-1 - math.log(math.exp(-1) + math.exp(-2)))


def test_registry_lists_the_text_methods() -> None:
    names = {m.name for m in all_methods()}
    assert set(TEXT_METHODS) <= names
    assert get_method("sdpo").targets == ("ranking",) and get_method("verifier").needs == "chat-llm-logprobs"
    with pytest.raises(MethodError, match="unknown method"):
        get_method("nope")


# -- arithmetic against a scripted server ----------------------------------------------------
def test_direct_single_parses_answers_counts_nan_and_caches(scripted, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def reply(messages: list[dict[str, str]]) -> str:
        t, s = map(int, marker(messages)[0][3:].split("-"))
        return "no idea" if s == 2 else f"reasoning... <answer>{t + s / 10}</answer>"

    server = scripted(reply=reply)
    ds = tiny_dataset()
    out = run_method("direct-single", ds, "dev", "q", server.url, cache_dir=tmp_path)
    assert out.scores["t1s1c1"] == pytest.approx(1.1) and out.scores["t0s0c1"] == 0.0
    assert math.isnan(out.scores["t0s2c1"]) and out.num_nan == 2
    sent = len(server.bodies)
    assert sent == 6
    again = run_method("direct-single", ds, "dev", "q", server.url, cache_dir=tmp_path)
    assert len(server.bodies) == sent and again.meta["cache_hits"] == 6
    assert json.dumps(again.scores, sort_keys=True) == json.dumps(out.scores, sort_keys=True)
    path = write_predictions(out, tmp_path / "p.parquet")
    preds = qpred.parse(path, path.name)
    assert len(preds.ids) == 6 and pq.read_table(path).column_names == ["id", "score"]


def test_a_failing_point_is_nan_not_a_failed_run(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(reply=lambda m: "<answer>1</answer>", fail=lambda m: 400 * ("obs0-1" in m[-1]["content"]))
    out = run_method("direct-single", tiny_dataset(1, 3), "dev", "q", server.url)
    assert out.scores["t0s0c1"] == 1.0 and math.isnan(out.scores["t0s1c1"])
    assert out.num_nan == 1 and out.meta["failed_points"] == 1
    server.fail = lambda m: 400  # every request refused (e.g. prompts beyond the context): all NaN, counted
    out = run_method("direct-single", tiny_dataset(1, 3), "dev", "q", server.url)
    assert out.num_nan == 3 and out.meta["failed_points"] == 3
    server.fail = lambda m: 404  # a broken backbone (wrong model): the run fails
    with pytest.raises(Exception, match="scripted failure 404"):
        run_method("direct-single", tiny_dataset(1, 3), "dev", "q", server.url)


def test_direct_16_averages_parsable_samples(scripted, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = scripted(reply=lambda m: "<answer>1</answer>")
    seeds: list[int] = []
    out = run_method("direct-16", tiny_dataset(1, 1), "dev", "v", server.url, seed=5,
                     options={"samples": 4})
    seeds = [b["seed"] for b in server.bodies]
    assert out.scores == {"t0s0": 1.0} and sorted(seeds) == [5, 6, 7, 8]
    server.reply = lambda m: "<answer>2</answer>" if server.local.body["seed"] % 2 else "bad"
    out = run_method("direct-16", tiny_dataset(1, 1), "dev", "v", server.url, seed=5, options={"samples": 4})
    assert out.scores == {"t0s0": 2.0} and out.meta["unparsable_answers"] == 2
    # a refused request loses its own sample, not the point's other answers, and is counted apart
    server.reply = lambda m: f"<answer>{server.local.body['seed']}</answer>"
    server.fail = lambda m: 400 * (server.local.body["seed"] == 8)
    out = run_method("direct-16", tiny_dataset(1, 1), "dev", "v", server.url, seed=5, options={"samples": 4})
    assert out.scores == {"t0s0": 6.0} and out.meta["unparsable_answers"] == 0 and out.meta["failed_points"] == 1


def test_direct_batched_and_sequential_split_points(scripted) -> None:  # type: ignore[no-untyped-def]
    def batched(messages: list[dict[str, str]]) -> str:
        return "".join(f"<answer_{i}>{int(m[3]) * 10 + int(m[5])}</answer_{i}>" for i, m in enumerate(marker(messages), 1))

    server = scripted(reply=batched)
    ds = tiny_dataset(2, 3)  # 6 points -> batches of 4 and 2
    out = run_method("direct-batched", ds, "dev", "v", server.url)
    assert out.scores == {f"t{t}s{s}": 10.0 * t + s for t in range(2) for s in range(3)}
    assert sorted(len(re.findall("## Datapoint", b["messages"][-1]["content"])) for b in server.bodies) == [2, 4]

    server.bodies.clear()
    server.reply = lambda m: f"<answer>{sum(1 for x in m if x['role'] == 'user')}</answer>"
    out = run_method("direct-sequential", tiny_dataset(2, 3), "dev", "q", server.url)
    assert out.scores == {f"t{t}s{s}c1": float(s + 1) for t in range(2) for s in range(3)}
    last = max(server.bodies, key=lambda b: len(b["messages"]))["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "Datapoint 3 of 3" in last[-1]["content"] and "obs0-2" in last[-1]["content"] or "obs1-2" in last[-1]["content"]


def test_gvl_shuffles_and_maps_values_back(scripted) -> None:  # type: ignore[no-untyped-def]
    shown: list[list[str]] = []

    def reply(messages: list[dict[str, str]]) -> str:
        order = marker(messages)
        shown.append(order)
        return "".join(f"<answer_{i}>{int(m[5])}</answer_{i}>" for i, m in enumerate(order, 1))

    server = scripted(reply=reply)
    out = run_method("gvl", tiny_dataset(2, 6), "dev", "v", server.url, seed=3)
    assert out.scores == {f"t{t}s{s}": float(s) for t in range(2) for s in range(6)}
    assert any(order != sorted(order, key=lambda m: int(m[5])) for order in shown)  # shown out of time order
    assert "Turn" not in server.bodies[0]["messages"][-1]["content"].split("Transition 1")[0][-50:]


def test_verifier_and_delta_belief_normalise_logprobs(scripted) -> None:  # type: ignore[no-untyped-def]
    def logprobs(messages: list[dict[str, str]], reply: str) -> list[float]:
        post = "one action has now been tried" in messages[-1]["content"]
        return {"Yes": [-0.5 if post else -1.0], "No": [-2.0 if post else -1.0]}[reply]

    server = scripted(logprobs=logprobs)
    out = run_method("verifier", tiny_dataset(1, 2), "dev", "q", server.url)
    expected = -1.0 - math.log(math.exp(-1.0) + math.exp(-1.0))
    assert out.scores == {"t0s0c1": pytest.approx(expected), "t0s1c1": pytest.approx(expected)}
    out = run_method("Δbelief", tiny_dataset(1, 1), "dev", "q", server.url)
    post = -0.5 - math.log(math.exp(-0.5) + math.exp(-2.0))
    assert len(out.scores) == 4
    assert all(v == pytest.approx(post - math.log(0.5)) for v in out.scores.values())


def test_sdpo_scores_mean_token_delta_and_needs_labels(scripted) -> None:  # type: ignore[no-untyped-def]
    seen: list[str] = []

    def logprobs(messages: list[dict[str, str]], reply: str) -> list[float]:
        teacher = "Evidence about the action" in messages[-1]["content"]
        seen.append(messages[-1]["content"])
        words = reply.split()
        return [-1.0, -3.0] if teacher else [-2.0] * len(words) if reply != "move left" else [-4.0, -2.0]

    server = scripted(logprobs=logprobs)
    ds = tiny_dataset(1, 1)
    out = run_method("sdpo", ds, "dev", "q", server.url)
    assert out.scores["t0s0c0"] == pytest.approx(-2.0 - (-3.0))  # "move left": teacher -2, student -3
    assert out.scores["t0s0c1"] == pytest.approx(0.0)
    teacher_texts = [t for t in seen if "Evidence" in t]
    assert any("judged good" in t for t in teacher_texts) and any("judged bad" in t for t in teacher_texts)
    out = run_method("sdpo-gt", ds, "dev", "q", server.url)
    assert any("Stored reference value of the action: 0.4" in t for t in seen)
    ds.q_labels.pop("t0s0c2")
    with pytest.raises(MethodError, match="reads the split's Q labels"):
        run_method("sdpo", ds, "dev", "q", server.url)


def test_ranking_parses_last_permutation_and_counts_unparsable(scripted) -> None:  # type: ignore[no-untyped-def]
    server = scripted(reply=lambda m: "2, 1, 3, 4 ... final: 3, 1, 4, 2" if "obs0-0" in m[-1]["content"] else "1, 2")
    out = run_method("ranking", tiny_dataset(1, 2), "dev", "q", server.url)
    assert [out.scores[f"t0s0c{i}"] for i in range(4)] == [3.0, 1.0, 4.0, 2.0]
    assert all(math.isnan(out.scores[f"t0s1c{i}"]) for i in range(4))
    assert out.meta["unparsable_states"] == 1 and out.num_nan == 4


def test_unsupported_target_is_refused(scripted) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MethodError, match="not target 'v'"):
        run_method("sdpo", tiny_dataset(), "dev", "v", "http://127.0.0.1:9")


# -- code: validation and the sandbox -----------------------------------------------------
GOOD = "import math\ndef signal_function(state, action, next_state):\n    return float(len(state)) + 0.5\n"
LOOP = "def signal_function(state, action, next_state):\n    while True:\n        pass\n"
FILE = "def signal_function(state, action, next_state):\n    return float(len(open('/input/job.json').read()))\n"
NET = "import socket\ndef signal_function(state, action, next_state):\n    return 1.0\n"
DUNDER = "def signal_function(state, action, next_state):\n    return ().__class__.__base__\n"
ARGS = "def signal_function(state):\n    return 1.0\n"


def test_signature_validation() -> None:
    from qval.methods import sandbox

    assert sandbox.validate(GOOD, 3) is None
    assert "socket" in sandbox.validate(NET, 3)  # type: ignore[operator]
    assert "is not allowed" in sandbox.validate(DUNDER, 3)  # type: ignore[operator]
    assert "3 positional" in sandbox.validate(ARGS, 3)  # type: ignore[operator]
    assert "syntax" in sandbox.validate("def signal_function(:", 3)  # type: ignore[operator]
    assert sandbox.extract_code("text ```python\nx = 1\n``` more ```python\ny = 2\n```") == "y = 2"


@pytest.mark.container
@pytest.mark.slow
def test_codegen_runs_functions_in_the_sandbox(scripted, engine, base_image, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("QVAL_CONTAINER_WORK_ROOT", str(engine.work_root))
    bodies = [GOOD, LOOP, FILE, NET]
    server = scripted(reply=lambda m: f"```python\n{bodies[server.local.body['seed'] % 4]}```")
    out = run_method("codegen", tiny_dataset(1, 2), "dev", "q", server.url, options={"samples": 4, "call_timeout_s": 0.5})
    # obs0-0 has 6 characters; only the first function is valid and finite
    assert out.samples is not None and out.samples["t0s0c1"][0] == 6.5
    assert all(math.isnan(v) for v in out.samples["t0s0c1"][1:])
    assert out.scores["t0s0c1"] == 6.5 and out.meta["valid_functions"] == 3
    assert Path("/etc/passwd").is_file()  # harmed nothing
    path = write_predictions(out, tmp_path / "codegen.parquet")
    assert qpred.parse(path, path.name).samples is not None
    avg = run_method("codegen-avg", tiny_dataset(1, 2), "dev", "q", server.url, options={"samples": 4, "call_timeout_s": 0.5})
    assert avg.scores == {"t0s0c1": 6.5, "t0s1c1": 6.5}


@pytest.mark.container
@pytest.mark.slow
def test_eureka_refines_with_the_judges_pick(scripted, engine, base_image, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("QVAL_CONTAINER_WORK_ROOT", str(engine.work_root))

    def reply(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if "Pick the candidate" in text:
            return "the second separates them <best>2</best>"
        constant = 2.0 if "return 2.0" in text else 1.0  # round 2 sees round 1's winner
        seed = server.local.body["seed"]
        value = constant * 10 + seed % 2
        return f"```python\ndef signal_function(state, action, next_state):\n    return {value}\n```"

    server = scripted(reply=reply)
    out = run_method("eureka", tiny_dataset(1, 3), "dev", "q", server.url,
                     options={"iterations": 2, "samples": 2, "judge_points": 2, "call_timeout_s": 0.5})
    rounds = out.meta["rounds"]
    assert [r["judge_pick"] for r in rounds] == [2, 2] and all(r["valid"] == 2 for r in rounds)
    assert "return 11" in out.meta["final_code"] or "return 10" in out.meta["final_code"]
    assert len(set(out.scores.values())) == 1 and out.num_nan == 0


# -- the command line -------------------------------------------------------------------------
def test_cli_lists_methods_and_predicts_a_file_the_site_accepts(scripted, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from qval.cli import main
    from qval.scoring import score, truth_from_dataset

    assert main(["methods", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed["Δbelief"]["family"] == "intrinsic" and set(TEXT_METHODS) <= set(listed)
    server = scripted(reply=lambda m: f"<answer>{int(marker(m)[0][5]) / 4}</answer>")
    directory = tiny_dataset().write(tmp_path / "ds")
    out = tmp_path / "preds.parquet"
    args = ["predict", "--method", "direct-single", "--backbone", server.url, "--dataset", str(directory),
            "--split", "dev", "--cache", str(tmp_path / "cache"), "-o", str(out)]
    assert main(args) == 0
    assert "6 scores, 0 NaN (6 requests, 0 from the cache)" in capsys.readouterr().out
    assert main(args) == 0
    assert "(0 requests, 6 from the cache)" in capsys.readouterr().out
    truth = truth_from_dataset(schema.Dataset.read(directory), "dev", "q")
    preds = qpred.parse(out, out.name)
    qpred.validate(preds, truth.index)
    rows = {r.metric: r for r in score(truth, preds.ids, preds.scores, bootstrap_resamples=0)}
    assert rows["spearman"].coverage == 1.0 and rows["spearman"].num_dropped == 0
    assert main(["predict", "--method", "sdpo", "--backbone", server.url, "--dataset", str(directory),
                 "--target", "v"]) == 1
    assert "not target 'v'" in capsys.readouterr().err


ESCAPE = '''def _os():
    for c in ().__class__.__base__.__subclasses__():
        if c.__name__ == "_wrap_close":
            return c.__init__.__globals__
'''


@pytest.mark.container
@pytest.mark.slow
def test_code_that_escapes_the_restricted_builtins_is_still_contained(engine, base_image) -> None:  # type: ignore[no-untyped-def]
    """Validation would refuse these (dunder access); run unvalidated, the container alone must hold them."""
    import socket

    from qval.methods import sandbox

    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    connect = f"import socket; socket.create_connection(('10.0.2.2', {port}), timeout=1)"
    sources = [
        ESCAPE + "def signal_function(state, action, next_state):\n    return float(_os()['getuid']())\n",
        ESCAPE + "def signal_function(state, action, next_state):\n"
                 "    return float(_os()['system']('touch /input/pwned 2>/dev/null || exit 3') >> 8)\n",
        ESCAPE + "def signal_function(state, action, next_state):\n"
                 f"    return float(_os()['system'](\"python3 -c \\\"{connect}\\\" 2>/dev/null\") >> 8)\n",
        ESCAPE + "def signal_function(state, action, next_state):\n    _os()['open']('/input/job.json', 1)\n    return 1.0\n",
        ESCAPE + "def signal_function(state, action, next_state):\n"
                 "    _os()['system'](\"python3 -c 'while True: pass'\")\n    return 1.0\n",
    ]
    assert all(sandbox.validate(s, 3) for s in sources)  # refused by validation in codegen/eureka
    rows = sandbox.run_functions(sources, [("a", "b", "c")], call_timeout_s=3, engine=engine, image=base_image)
    assert rows[0] == [65534.0]  # it escaped, but runs as nobody
    assert rows[1] == [3.0]  # /input is read-only
    assert rows[2] == [1.0]  # no network: the connection failed
    assert math.isnan(rows[3][0]) and math.isnan(rows[4][0])  # write refused; the endless call was cut off
    with pytest.raises(socket.timeout):
        listener.accept()
    listener.close()
