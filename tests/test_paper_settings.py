"""The paper's Tables 3–4 (method hyperparameters, backbone decoding settings) as project data converted from
the paper's text (qval.paper_settings), and the method pages that show them next to the site's own settings."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from qval import families
from qval.paper.qval_v1 import settings as paper_settings
from qval.paper.qval_v1.published import PublishedDataError

PAPER = Path(__file__).resolve().parents[1].parent / "shared" / "seeds" / "qval-paper.txt"


@pytest.fixture
def paper_text() -> str:
    if not PAPER.is_file():
        pytest.skip(f"the paper's text is not at {PAPER}")
    return PAPER.read_text(encoding="utf-8")


def _table3_value(text: str, method: str, hyperparameter: str) -> str:
    """A Table 3 value as printed, found here by its own pattern (not the converter's)."""
    found = re.search(rf"^<code>{re.escape(method)}</code>\t{re.escape(hyperparameter)}\t(.+)$", text, re.M)
    assert found, (method, hyperparameter)
    return found.group(1)


def _table4_row(text: str, model: str) -> list[str]:
    found = re.search(rf"^{re.escape(model)}\t(.+)$", text, re.M)
    assert found, model
    return found.group(1).split("\t")


def test_settings_file_is_the_conversion_of_the_paper_text(paper_text: str) -> None:
    data = paper_settings.convert_settings(paper_text)
    assert json.loads(paper_settings.SETTINGS_FILE.read_text(encoding="utf-8")) == data
    sources = {r["method"]: r for r in data["sources"]}
    assert set(sources) == {m for f in families.FAMILIES for m in f.methods}  # Table 1 covers the 21 methods
    for r in data["sources"]:  # each method is printed with its source on the line it names
        assert f"■ <code>{r['printed']}</code> ({r['source']})" in paper_text.splitlines()[r["line"] - 1], r
    assert (sources["liv-l2"]["printed"], sources["vip"]["source"]) == ("liv-12", "Ma et al., 2022")
    assert "Table 3" in data["provenance"]["where"] and "Table 4" in data["provenance"]["where"]
    lines = paper_text.splitlines()
    for row in data["methods"]:  # each row is the line it names
        printed = lines[row["line"] - 1]
        assert printed.startswith(f"<code>{row['printed']}</code>\t{row['hyperparameter']}\t"), row
    assert len(data["methods"]) == 24
    by = {(m, r["hyperparameter"]): r["value"] for r in data["methods"] for m in r["methods"]}
    assert by["eureka", "search iterations"] == _table3_value(paper_text, "eureka", "search iterations") == "16"
    assert by["vlm-sor-softmax", "τ"] == _table3_value(paper_text, "vlm-sor-softmax", "τ")
    assert by["vlm-sor", "negative goals"] == by["vlm-sor-softmax", "negative goals"] == "3 per env"  # 'vlm-sor*'
    assert by["liv-l2", "backbone"] == "CLIP-RN50 (EpicKitchens)"
    models = {m["backbone"]: m for m in data["decoding"]["models"]}
    assert len(models) == 6
    qwen = _table4_row(paper_text, "qwen/qwen3.5-27b")
    assert (models["Qwen3.5 27B"]["temperature"], models["Qwen3.5 27B"]["top_k"]) == (float(qwen[0]), int(qwen[2]))
    assert lines[models["Gemma4 31B"]["line"] - 1].startswith("google/gemma-4-31b-it\t")
    shared = data["decoding"]["all_runs"]
    assert (shared["context_tokens"], shared["thinking_budget_tokens"], shared["codegen_max_tokens"]) \
        == (262144, 6144, 14336)


def test_a_text_without_the_tables_is_refused(paper_text: str) -> None:
    with pytest.raises(PublishedDataError, match="Table 1"):
        paper_settings.convert_settings("no tables here")
    with pytest.raises(PublishedDataError, match="Table 3"):
        paper_settings.convert_settings(paper_text.replace("\nTable 3:", "\nTable three:"))
    with pytest.raises(PublishedDataError, match="Table 1, line 110"):
        paper_settings.convert_settings(paper_text.replace("<code>verifier</code> (Kwok", "verifier (Kwok"))
    with pytest.raises(PublishedDataError, match="Table 4: columns"):
        paper_settings.convert_settings(paper_text.replace("Model\tTemp.", "Model\tHeat"))
    with pytest.raises(PublishedDataError, match="none of the backbones"):
        paper_settings.convert_settings(paper_text.replace("qwen/qwen3.5-9b\t", "qwen/qwen9-9b\t"))


def test_each_method_gets_its_rows_and_llm_methods_the_decoding() -> None:
    codegen = {s.setting: s for s in paper_settings.method_settings("codegen")}
    assert codegen["samples (functions)"].value == "16" and codegen["samples (functions)"].site_param == "samples"
    assert codegen["max tokens"].value == "14336 (code generation)"
    direct = {s.setting: s.value for s in paper_settings.method_settings("direct-single")}
    assert direct["max tokens"] == "8192" and direct["top-p"] == "0.95"
    assert direct["temperature"].startswith("1.0 (Gemma4 31B, Gemma4 26B-A4B); 0.6 (Qwen3.5 9B")
    assert [s.setting for s in paper_settings.method_settings("vip")] == ["backbone", "goal source"]  # no decoding
    assert paper_settings.method_settings("my-own-method") == []


def _settings_table(page: str) -> dict[str, tuple[str, ...]]:
    section = re.search(r'<section id="paper-settings">(.*?)</section>', page, re.S)
    assert section, "no paper-settings section"
    rows = re.findall(r'<tr data-setting="([^"]+)">(.*?)</tr>', section.group(1), re.S)
    return {html.unescape(k): tuple(html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                                    for c in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)) for k, body in rows}


def test_method_pages_show_the_papers_settings_next_to_ours(db, client, paper_text: str) -> None:  # type: ignore[no-untyped-def]
    from leaderboard.models import Method
    from qval.methods.registry import get_method

    for name, family in (("eureka", "code"), ("direct-single", "direct"), ("vlm-sor-softmax", "embedding"),
                         ("goal-distance", "other")):
        Method.objects.create(name=name, family=family)
    page = client.get("/methods/eureka/").content.decode()
    source = re.search(r"■ <code>eureka</code> \(([^)]+)\)", paper_text)
    assert source and f"source <strong>{source.group(1)}</strong>" in page  # Table 1
    eureka = _settings_table(page)
    assert eureka["search iterations"][1] == _table3_value(paper_text, "eureka", "search iterations")
    assert eureka["search iterations"][2] == str(get_method("eureka").params["iterations"])  # ours, next to it
    assert eureka["judge held-out points"][1] == _table3_value(paper_text, "eureka", "judge held-out points")
    assert eureka["max tokens"][1].startswith(_table4_row(paper_text, "qwen/qwen3.5-27b")[4])  # codegen max tokens
    assert eureka["max tokens"][2] == str(get_method("eureka").params["max_tokens"])
    direct = _settings_table(client.get("/methods/direct-single/").content.decode())
    assert direct["samples / point"][1:] == (_table3_value(paper_text, "direct-single", "samples / point"), "—",
                                             f"Table 3, line {paper_text.splitlines().index('<code>direct-single</code>	samples / point	1') + 1}")
    qwen_temperature = _table4_row(paper_text, "qwen/qwen3.5-9b")[0]
    assert f"{qwen_temperature} (Qwen3.5 9B" in direct["temperature"][1]
    assert direct["temperature"][2] == str(get_method("direct-single").params["temperature"])
    assert direct["max tokens"][1] == _table4_row(paper_text, "qwen/qwen3.5-9b")[3]
    lines = paper_text.splitlines()
    first, last = (int(n) for n in re.fullmatch(r"Table 4, lines (\d+)–(\d+)", direct["max tokens"][3]).groups())  # type: ignore[union-attr]
    assert lines[first - 1].startswith("google/gemma-4-31b-it\t") and lines[last - 1].startswith("qwen/qwen3.5-122b")
    embedding = _settings_table(client.get("/methods/vlm-sor-softmax/").content.decode())
    assert embedding == {"τ": ("τ", _table3_value(paper_text, "vlm-sor-softmax", "τ"),
                                 str(get_method("vlm-sor-softmax").params["tau"]), embedding["τ"][3]),
                         "negative goals": ("negative goals", "3 per env", "—", embedding["negative goals"][3])}
    ours = client.get("/methods/goal-distance/")  # a built-in method the paper does not have
    assert ours.status_code == 200
    assert 'id="paper-settings"' not in ours.content.decode() and 'id="paper-source"' not in ours.content.decode()
