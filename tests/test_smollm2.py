"""SmolLM2-135M-Instruct, the default backbone ``smollm2-135m`` (qval/smollm2.py): the installed file and its
digest, its GGUF loading, its model card on the site, and three built-in text methods end to end on it.

The end-to-end test takes the tiny random model's place in the methods' code path (``run_method`` → the
method → :class:`qval.methods.llm.LLMClient` → our :class:`qval.backbone.BackboneServer` →
:class:`qval.backbone.TransformersBackend`), on a hand-made dataset of one trajectory, and recomputes
what the methods got straight from the model with ``transformers``: their scores are SmolLM2's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from qval import schema, smollm2
from qval.methods import context, parsing
from qval.methods.direct import _single_messages
from qval.methods.run import run_method


# -- the installed file, its digest and its spec ------------------------------------------------
def test_the_installed_wheel_holds_the_file_of_the_known_digest() -> None:
    assert smollm2.installed(), f"SmolLM2-135M-Instruct is not installed: {smollm2.INSTALL_HINT}"
    path = smollm2.verified_file()
    assert path.name == smollm2.FILE_NAME and path.stat().st_size == smollm2.FILE_BYTES
    spec = smollm2.backbone_spec()
    assert spec == {"kind": "transformers", "path": str(path.parent), "gguf_file": smollm2.FILE_NAME,
                    "sha256": smollm2.SHA256, "prefixes": smollm2.PREFIXES}
    assert smollm2.default_backbones() == {"smollm2-135m": spec}


def test_a_file_of_another_digest_is_refused_before_loading(tmp_path: Path) -> None:
    from qval.backbone import TransformersBackend, backend_from_spec

    (tmp_path / smollm2.FILE_NAME).write_bytes(b"GGUF not the model")
    with pytest.raises(smollm2.ModelFileError, match=f"not the expected {smollm2.SHA256}.*make install"):
        backend_from_spec("smollm2-135m", {**smollm2.backbone_spec(), "path": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="no such GGUF checkpoint file"):
        TransformersBackend(tmp_path, gguf_file="missing.gguf")


def test_it_is_served_by_default_and_the_environment_adds_to_it(settings) -> None:  # type: ignore[no-untyped-def]
    import json
    import os
    import subprocess
    import sys

    if "smollm2-135m" not in json.loads(os.environ.get("QVAL_BACKBONES") or "{}"):  # not replaced by this machine
        assert settings.QVAL_BACKBONES["smollm2-135m"] == smollm2.backbone_spec()
    code = "from django.conf import settings; import json; print(json.dumps(sorted(settings.QVAL_BACKBONES)))"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "qval_site.settings",
           "QVAL_BACKBONES": json.dumps({"qwen": {"kind": "upstream", "url": "http://127.0.0.1:8001", "model": "q"}})}
    out = subprocess.run([sys.executable, "-c", "import django; django.setup(); " + code], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert json.loads(out) == ["qwen", "smollm2-135m"]


def test_a_baseline_serves_the_checked_gguf_file(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from qval.methods.registry import MethodError, get_method
    from submissions.baselines import served_backbone

    settings.QVAL_BACKBONES = smollm2.default_backbones()
    with served_backbone("smollm2-135m", get_method("direct-single"), None) as (spec, options, config):
        assert spec == str(smollm2.model_file()) and config["backbone_kind"] == "transformers"
        assert options["backbone_identity"] == config["checkpoint"] and config["checkpoint"].startswith(
            smollm2.FILE_NAME + "@")
        assert options["serving"] == {"prefixes": smollm2.PREFIXES}  # served in the run's process as its entry says
    (tmp_path / smollm2.FILE_NAME).write_bytes(b"tampered")
    settings.QVAL_BACKBONES = {"smollm2-135m": {**smollm2.backbone_spec(), "path": str(tmp_path)}}
    with pytest.raises(MethodError, match="not the expected"):
        with served_backbone("smollm2-135m", get_method("direct-single"), None):
            pass


def test_the_method_page_shows_its_model_card(db, client) -> None:  # type: ignore[no-untyped-def]
    from leaderboard.models import Method

    Method.objects.create(name="verifier", family="intrinsic")
    Method.objects.create(name="step-index", family="other")
    page = client.get("/methods/verifier/").content.decode()
    card = smollm2.CARD
    assert 'data-backbone="smollm2-135m"' in page
    for fact in (card.parameters, card.quantisation, card.licence, card.upstream.replace("'", "&#x27;"),
                 f"{smollm2.DISTRIBUTION} {smollm2.VERSION}"):
        assert fact in page
    assert "data-backbone=" not in client.get("/methods/step-index/").content.decode()  # no model: no backbones


def test_the_manual_states_the_cards_facts() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "methods.md").read_text(encoding="utf-8")
    card = smollm2.CARD
    for fact in (card.name, card.model, card.parameters, card.quantisation, card.licence,
                 f"`{smollm2.DISTRIBUTION}` {smollm2.VERSION}", f"{smollm2.PACKAGE}/{smollm2.FILE_NAME}",
                 f"{smollm2.FILE_BYTES:,} bytes", f"{card.context_tokens:,}-token context"):
        assert fact in text, fact


# -- the conversion kept per machine ---------------------------------------------------------------
@pytest.mark.slow
def test_the_served_model_is_the_gguf_files_as_transformers_reads_it(smollm2) -> None:  # type: ignore[no-untyped-def]
    """The session's backend reads the checkpoint :mod:`qval.model_cache` converted (once per machine): its
    weights, tokenizer, chat prompt and end token are those of the GGUF file loaded by ``transformers`` here."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from qval import smollm2 as smol
    from qval.model_cache import RECORD, converted

    backend, _ = smollm2
    folder = converted(smol.model_dir(), smol.FILE_NAME, smol.SHA256)
    record = (folder / RECORD).read_text()
    assert smol.SHA256 in record and backend.model.name_or_path == str(folder)
    assert backend.prefixes.size == smol.PREFIXES  # its entry's prompt blocks kept
    load = {"gguf_file": smol.FILE_NAME, "local_files_only": True}
    direct = AutoModelForCausalLM.from_pretrained(smol.model_dir(), **load, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(smol.model_dir(), **load)
    served = backend.model.state_dict()
    assert set(served) == set(direct.state_dict())
    assert all(torch.equal(served[k], v) for k, v in direct.state_dict().items())
    chat = [{"role": "system", "content": "Rate the move."}, {"role": "user", "content": "FrozenLake: move left?"}]
    assert backend.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == \
        tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    text = "You are in a kitchen. You see a fridge 1, a sinkbasin 1 and a mug 2."
    assert backend.tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert backend.tokenizer.eos_token_id == tokenizer.eos_token_id
    assert converted(smol.model_dir(), smol.FILE_NAME, smol.SHA256) == folder
    assert (folder / RECORD).read_text() == record  # read again, not converted again


# -- three methods end to end on SmolLM2 ---------------------------------------------------------
def tiny_dataset(steps: int = 2, num_candidates: int = 2) -> schema.Dataset:
    """One FrozenLake trajectory of ``steps`` states, ``num_candidates`` candidates each (short prompts)."""
    actions = ("move right", "move down", "move left", "move up")[:num_candidates]
    states, q, v = [], {}, {}
    for s in range(steps):
        sid = f"s{s}"
        cands = tuple(schema.Candidate(id=f"{sid}c{i}", state_id=sid, index=i, action=a,
                                       next_state=f"You are at row {s}, column {i + 1}.", is_actor=i == 0)
                      for i, a in enumerate(actions))
        states.append(schema.State(id=sid, split="dev", trajectory=0, step=s, task="Reach the goal G.",
                                   observation=f"You are at row {s}, column 0. The goal is at row 3, column 3.",
                                   history=actions[:1] * s, candidates=cands))
        v[sid] = 0.5
        q.update({c.id: 0.1 * (i + 1) for i, c in enumerate(cands)})
    manifest = schema.Manifest(slug="fl-smol", name="t", version="1", environment="frozenlake", description="",
                               modalities=["text"], labelling={"discount": 0.95}, config={})
    return schema.Dataset(manifest=manifest, states=states, q_labels=q, v_labels=v)


def _ids(tokenizer: Any, messages: list[dict[str, str]], **template: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tokenize=True, **template)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def direct_log_p_yes(backend: Any, messages: list[dict[str, str]]) -> float:
    """``log p(Yes) − lse(log p(Yes), log p(No))`` of SmolLM2's reply to ``messages``, straight from the model: one
    forward pass over the chat up to the reply, both answers being one token after it."""
    import torch

    tok = backend.tokenizer
    yes, no = (_ids(tok, messages + [{"role": "assistant", "content": a}], add_generation_prompt=False,
                    continue_final_message=True) for a in ("Yes", "No"))
    assert yes[:-1] == no[:-1], "Yes and No should be one token each after the same prompt"
    with torch.no_grad():
        logprobs = backend.model(torch.tensor([yes[:-1]])).logits[0, -1].float().log_softmax(-1)
    lp_yes, lp_no = float(logprobs[yes[-1]]), float(logprobs[no[-1]])
    return lp_yes - math.log(math.exp(lp_yes) + math.exp(lp_no))


def direct_reply(backend: Any, messages: list[dict[str, str]], max_tokens: int) -> str:
    """SmolLM2's greedy reply to ``messages`` (``max_tokens`` at most), with ``transformers``' own ``generate``."""
    import torch

    tok = backend.tokenizer
    ids = _ids(tok, messages, add_generation_prompt=True)
    with torch.no_grad():
        out = backend.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                     max_new_tokens=max_tokens, do_sample=False, eos_token_id=tok.eos_token_id,
                                     pad_token_id=tok.eos_token_id)
    return tok.decode(out[0, len(ids):], skip_special_tokens=True)


@pytest.mark.slow
def test_three_text_methods_run_on_smollm2_and_score_with_its_outputs(smollm2, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    backend, socket = smollm2
    ds = tiny_dataset(steps=1)  # one state, two candidates: SmolLM2 reads about 400 prompt tokens a request
    state, env, max_tokens = ds.states[0], context.env_text("frozenlake"), 12

    # Δbelief (log-probabilities): a candidate's score recomputed with the model itself.
    belief = run_method("Δbelief", ds, "dev", "q", socket, cache_dir=tmp_path / "belief")
    assert set(belief.scores) == {c.id for c in state.candidates} and belief.num_nan == 0
    assert belief.meta["model"] == "smollm2-135m" and belief.meta["requests"] == 2 * (1 + len(state.candidates))
    system = context.render("belief_system", value_definition=context.value_definition("q"),
                            environment=context.environment_block(env))
    cand = state.candidates[1]
    pre = direct_log_p_yes(backend, [{"role": "system", "content": system}, {"role": "user", "content": context.render(
        "belief_pre", point=context.point_text(env, state, None))}])
    post = direct_log_p_yes(backend, [{"role": "system", "content": system}, {"role": "user", "content": context.render(
        "belief_post", point=context.point_text(env, state, cand))}])
    assert belief.scores[cand.id] == pytest.approx(post - pre, abs=1e-3)
    assert belief.scores[cand.id] != belief.scores[state.candidates[0].id]  # the candidates' outcomes differ

    # direct-single (generation): the score is the parse of SmolLM2's own greedy reply; a reply that does not
    # parse is NaN and counted, never filled in.
    direct = run_method("direct-single", ds, "dev", "v", socket, cache_dir=tmp_path / "direct",
                        options={"max_tokens": max_tokens})
    (point,) = context.points_of(ds.states, "v")
    expected = parsing.parse_answer(direct_reply(backend, _single_messages(env, "v", point), max_tokens))
    assert list(direct.scores) == [state.id] and direct.meta["requests"] == 1
    assert (math.isnan(direct.scores[state.id]) and math.isnan(expected)) or direct.scores[state.id] == expected
    assert direct.num_nan == direct.meta["unparsable_answers"] == int(math.isnan(expected))
    assert 0 < direct.meta["completion_tokens"] <= max_tokens

    # ranking (generation): the candidates get the scores of the permutation in SmolLM2's reply, or all NaN,
    # counted as an unparsable state.
    ranked = run_method("ranking", ds, "dev", "q", socket, cache_dir=tmp_path / "ranking",
                        options={"max_tokens": max_tokens})
    k = len(state.candidates)
    candidates = "\n\n".join(f"[Candidate {i}]\n{c.action}\n[Resulting state {i}]\n{c.next_state}"
                              for i, c in enumerate(state.candidates, 1))
    reply = direct_reply(backend, [
        {"role": "system", "content": context.render("ranking_system", value_definition=context.value_definition("q"),
                                                     environment=context.environment_block(env),
                                                     example=", ".join(str(i) for i in range(k, 0, -1)))},
        {"role": "user", "content": context.render("ranking_user", k=k, point=context.point_text(env, state, None),
                                                   candidates=candidates)}], max_tokens)
    order = parsing.parse_permutation(reply, k)
    got = [ranked.scores[c.id] for c in state.candidates]
    if order is None:
        assert all(math.isnan(v) for v in got) and ranked.meta["unparsable_states"] == 1 and ranked.num_nan == k
    else:
        assert got == [float(k - order.index(i)) for i in range(k)] and ranked.meta["unparsable_states"] == 0
