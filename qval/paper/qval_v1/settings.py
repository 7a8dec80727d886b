"""The QVal paper's facts about its methods: Table 1 (each method's family and source), Table 3 (each method's
hyperparameters, Appendix C.10) and Table 4 (each backbone's sampling settings, Appendix D, with the paragraph
above it that sets what all runs share), so a method page can show where the method comes from and the paper's
settings next to the site's own.

The settings are project data (``data/qval-v1.0/settings.json``, with its provenance): :func:`convert_settings`
made it once from the paper's text (``qval-paper.txt``, a PDF extraction) and the tests check the file still
equals it.  The reading:

* Table 1 prints a line per method group, each method as ``■ <code>name</code> (source)``; the extraction
  garbles ``liv-l2`` as ``liv-12`` (:data:`GARBLED`).
* Table 3 prints one hyperparameter a line, ``method <tab> hyperparameter <tab> value``; a method cell may
  name several methods (``liv-cos, liv-l2``) or end in ``*`` (``vlm-sor*``: every method of the table whose
  name starts so); ``<code>`` tags and TeX dollars are dropped from the printed text.
* Table 4's rows name the model as its checkpoint (``qwen/qwen3.5-27b``); each is matched to the backbone
  name of the authors' data (``Qwen3.5 27B``) by its letters and digits.  The paragraph above the table gives
  the context length, nucleus *p*, thinking budget and the two generation lengths (value prediction,
  code generation) of every run.

Which methods the decoding settings apply to is our reading: the LLM families of Table 1 (:data:`LLM_FAMILIES`);
code generation (:data:`CODE_FAMILY`) uses the code-generation length.  Nothing here knows about Django.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qval import families
from qval.errata import BACKBONES
from qval.paper.qval_v1.published import DATA_DIR, PAPER, PublishedDataError

SETTINGS_FILE: Path = DATA_DIR / "settings.json"

LLM_FAMILIES: tuple[str, ...] = ("direct", "code", "self-distillation", "intrinsic", "ranking")
"""The families whose methods prompt an LLM backbone, so run under Table 4's settings (the pre-trained and
embedding methods use their encoders, the paper's Appendix C.11)."""
CODE_FAMILY: str = "code"
"""The family whose runs generate code, with Table 4's *codegen max tokens*."""

SITE_PARAMS: dict[str, str] = {
    "samples / point": "samples", "samples (functions)": "samples", "batch size": "batch_size",
    "search iterations": "iterations", "samples per iter": "samples", "judge held-out points": "judge_points",
    "α": "alpha", "τ": "tau", "β (threshold)": "beta",
    "temperature": "temperature", "top-p": "top_p", "max tokens": "max_tokens",
}
"""A setting as the paper names it and the built-in method parameter that is the same setting
(:mod:`qval.methods`); a setting not here has no counterpart on the site."""

GARBLED: dict[str, str] = {"liv-12": "liv-l2"}
"""Method names the PDF extraction garbles in Table 1, and the names they stand for."""

_TABLE4_COLUMNS: dict[str, str] = {"Temp.": "temperature", "Top-p": "top_p", "Top-k": "top_k",
                                   "Maxtokens": "max_tokens", "Codegenmaxtokens": "codegen_max_tokens"}
"""Table 4's printed column headers (spaces removed) and the keys of ``settings.json``."""

_ALL_RUNS: dict[str, str] = {
    "context_tokens": r"maximum context length of ([\d,]+) tokens",
    "top_p": r"nucleus sampling with \$p = ([\d.]+)\$",
    "thinking_budget_tokens": r"thinking budget of ([\d,]+) tokens",
    "max_tokens": r"maximum generation length of ([\d,]+) tokens",
    "codegen_max_tokens": r"code-generation runs used ([\d,]+) tokens",
}
"""What every run shares, and the phrase of Appendix D that gives it."""


def _line_of(text: str, offset: int) -> int:
    """The 1-based line of ``text`` holding character ``offset``."""
    return text.count("\n", 0, offset) + 1


def _clean(cell: str) -> str:
    """A printed cell without ``<code>`` tags, TeX dollars and escaped braces."""
    return re.sub(r"</?code>|\$|\\(?=[{}])", "", cell).strip()


def _number(text: str) -> int | float:
    value = text.replace(",", "")
    return int(value) if value.isdigit() else float(value)


def _backbone(model: str) -> str:
    """The backbone name of the authors' data for a Table 4 checkpoint (``google/gemma-4-31b-it`` is
    ``Gemma4 31B``)."""
    key = re.sub(r"[^a-z0-9]", "", model.split("/")[-1].lower().removesuffix("-it"))
    found = [b for b in BACKBONES if re.sub(r"[^a-z0-9]", "", b.lower()) == key]
    if len(found) != 1:
        raise PublishedDataError(f"Table 4: model {model!r} is none of the backbones {', '.join(BACKBONES)}")
    return found[0]


def _table1(paper_text: str) -> list[dict[str, Any]]:
    caption = paper_text.find("\nTable 1:")
    header = paper_text.find("\nMethod group\t", caption)
    if caption < 0 or header < 0:
        raise PublishedDataError("the paper text has no Table 1 with a 'Method group' header")
    first = _line_of(paper_text, header + 1) + 1
    rows: list[dict[str, Any]] = []
    for i, line in enumerate(paper_text[header + 1:].splitlines()[1:]):
        if not line.strip():
            break
        group, _, methods = line.partition("\t")
        found = re.findall(r"■ <code>([^<]+)</code> \(([^)]+)\)", methods)
        if not found or len(found) != methods.count("■") or len(found) != methods.count("<code>"):
            raise PublishedDataError(f"Table 1, line {first + i}: cannot read the methods of {group!r}")
        rows += [{"method": GARBLED.get(name, name), "printed": name, "group": group, "source": source,
                  "line": first + i} for name, source in found]
    return rows


def _table3(paper_text: str) -> list[dict[str, Any]]:
    start = paper_text.find("\nTable 3:")
    end = paper_text.find("\nC.11", start)
    if start < 0 or end < 0:
        raise PublishedDataError("the paper text has no Table 3 followed by Appendix C.11")
    rows: list[dict[str, Any]] = []
    offset = start + 1
    for line in paper_text[start + 1:end].splitlines(keepends=True):
        cells = line.rstrip("\n").split("\t")
        if len(cells) == 3 and cells[0].startswith("<code>"):
            printed = _clean(cells[0])
            rows.append({"printed": printed, "methods": [m.strip() for m in printed.split(",")],
                         "hyperparameter": _clean(cells[1]), "value": _clean(cells[2]),
                         "line": _line_of(paper_text, offset)})
        offset += len(line)
    if not rows:
        raise PublishedDataError("Table 3: no 'method <tab> hyperparameter <tab> value' line")
    named = {m for r in rows for m in r["methods"] if not m.endswith("*")}
    for r in rows:
        r["methods"] = [n for m in r["methods"] for n in
                        (sorted(x for x in named if x.startswith(m[:-1])) if m.endswith("*") else [m])]
        if not r["methods"]:
            raise PublishedDataError(f"Table 3, line {r['line']}: {r['printed']!r} names no method of the table")
    return rows


def _table4(paper_text: str) -> dict[str, Any]:
    start = paper_text.find("\nD Model Details")
    end = paper_text.find("\nTable 4:", start)
    if start < 0 or end < 0:
        raise PublishedDataError("the paper text has no Appendix D followed by Table 4")
    section = paper_text[start:end]
    all_runs: dict[str, Any] = {}
    for key, phrase in _ALL_RUNS.items():
        found = re.search(phrase, section)
        if found is None:
            raise PublishedDataError(f"Appendix D: no {phrase!r} (for {key})")
        all_runs[key] = _number(found.group(1))
        all_runs.setdefault("line", _line_of(paper_text, start + found.start()))
    header = next((line for line in section.splitlines() if line.startswith("Model\t")), None)
    if header is None:
        raise PublishedDataError("Table 4: no header line starting 'Model'")
    columns = [c.replace(" ", "") for c in header.split("\t")[1:]]
    if columns != list(_TABLE4_COLUMNS):
        raise PublishedDataError(f"Table 4: columns {columns}, expected {list(_TABLE4_COLUMNS)}")
    models = []
    for found in re.finditer(r"^([a-z]+/[^\t]+)\t(.*)$", section, re.M):
        values = found.group(2).split("\t")
        if len(values) != len(columns):
            raise PublishedDataError(f"Table 4: model {found.group(1)!r} has {len(values)} cells, expected {len(columns)}")
        models.append({"model": found.group(1), "backbone": _backbone(found.group(1)),
                       **{_TABLE4_COLUMNS[c]: _number(v) for c, v in zip(columns, values)},
                       "line": _line_of(paper_text, start + found.start())})
    if sorted(m["backbone"] for m in models) != sorted(BACKBONES):
        raise PublishedDataError(f"Table 4: backbones {[m['backbone'] for m in models]}, expected {list(BACKBONES)}")
    return {"all_runs": all_runs, "models": models}


def convert_settings(paper_text: str) -> dict[str, Any]:
    """The project's settings data (``settings.json``) of the paper's text; a table that does not have the
    expected shape raises :class:`~qval.paper.qval_v1.published.PublishedDataError` saying where."""
    return {
        "provenance": {
            "paper": f"{PAPER['title']} (arXiv {PAPER['arxiv']})",
            "where": "Section 3, Table 1 (methods and their sources); Appendix C.10, Table 3 (method-specific "
                     "hyperparameters); Appendix D, Table 4 (LLM sampling settings) and the paragraph above it (what "
                     "every run shares)",
            "reading": "Table 1: a line per method group, each method '■ name (source)'; 'liv-12' read as liv-l2 "
                       "(garbled by the extraction). Table 3: one hyperparameter a line; a method cell naming several methods is split at commas "
                       "and 'vlm-sor*' stands for every method of the table starting 'vlm-sor'; <code> tags and TeX "
                       "dollars dropped. Table 4: each checkpoint matched to the backbone name of the authors' data "
                       "by its letters and digits. 'line' is the 1-based line of qval-paper.txt",
        },
        "sources": _table1(paper_text),
        "methods": _table3(paper_text),
        "decoding": _table4(paper_text),
    }


@dataclass(frozen=True)
class PaperSetting:
    """One of the paper's settings for a method: its name as the paper gives it, the printed value, where
    it is printed, and the built-in method parameter that is the same setting (``None``: none is)."""

    setting: str
    value: str
    where: str
    site_param: str | None


def settings_data(path: Path = SETTINGS_FILE) -> dict[str, Any]:
    """The settings file (``data/qval-v1.0/settings.json``) as stored."""
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PublishedDataError(f"{path}: cannot read ({exc!r})") from exc
    decoding = data.get("decoding")
    if not isinstance(data.get("sources"), list) or not isinstance(data.get("methods"), list) \
            or not isinstance(decoding, dict) or not {"all_runs", "models"} <= set(decoding):
        raise PublishedDataError(f"{path}: expected 'sources', 'methods' and 'decoding' with 'all_runs' and 'models'")
    return data


@dataclass(frozen=True)
class PaperSource:
    """Where the paper says a method comes from (Table 1): its group there, the source as printed (a citation,
    *Baseline* or *Extension*), and the line."""

    group: str
    source: str
    where: str


def method_source(method: str, path: Path = SETTINGS_FILE) -> PaperSource | None:
    """The paper's Table 1 entry of ``method``; ``None`` for a method the paper does not cover."""
    row = next((r for r in settings_data(path)["sources"] if r["method"] == method), None)
    return None if row is None else PaperSource(row["group"], row["source"], f"Table 1, line {row['line']}")


def _per_backbone(models: list[dict[str, Any]], key: str) -> str:
    """A Table 4 column as text: one value, or each value with the backbones that use it."""
    values: dict[Any, list[str]] = {}
    for m in models:
        values.setdefault(m[key], []).append(m["backbone"])
    if len(values) == 1:
        return str(next(iter(values)))
    return "; ".join(f"{v} ({', '.join(b)})" for v, b in values.items())


def method_settings(method: str, path: Path = SETTINGS_FILE) -> list[PaperSetting]:
    """The paper's settings of ``method``: its Table 3 hyperparameters, then, for a method of an LLM family
    (:data:`LLM_FAMILIES`), Table 4's decoding settings; empty for a method the paper does not run."""
    data = settings_data(path)
    out = [PaperSetting(r["hyperparameter"], r["value"], f"Table 3, line {r['line']}", SITE_PARAMS.get(r["hyperparameter"]))
           for r in data["methods"] if method in r["methods"]]
    if families.of_method(method).slug not in LLM_FAMILIES:
        return out
    shared, models = data["decoding"]["all_runs"], data["decoding"]["models"]
    table4 = f"Table 4, lines {min(m['line'] for m in models)}–{max(m['line'] for m in models)}"
    code = families.of_method(method).slug == CODE_FAMILY
    tokens = "codegen_max_tokens" if code else "max_tokens"
    decoding = [
        ("temperature", _per_backbone(models, "temperature"), table4),
        ("top-p", _per_backbone(models, "top_p"), table4),
        ("top-k", _per_backbone(models, "top_k"), table4),
        ("max tokens", f"{_per_backbone(models, tokens)}{' (code generation)' if code else ''}", table4),
        ("thinking budget", f"{shared['thinking_budget_tokens']} tokens", f"Appendix D, line {shared['line']}"),
        ("context length", f"{shared['context_tokens']} tokens", f"Appendix D, line {shared['line']}"),
    ]
    return out + [PaperSetting(name, value, where, SITE_PARAMS.get(name)) for name, value, where in decoding]
