"""The shared method context of every prompted method, and its versioned prompt templates.

Templates live in ``prompts/<PROMPT_VERSION>/`` beside this module (``string.Template`` files,
``${slot}`` placeholders); the per-environment texts (task, reward, observation and action spaces,
horizon, verifier criteria) live in each environment's folder, ``prompts/<PROMPT_VERSION>.json``
(:meth:`qval.envs.entry.EnvironmentEntry.prompt_context`).  :func:`prompt_hash` is the SHA-256 of
the templates and every environment's texts, recorded with every run.  A changed wording is a new
version, so older runs stay reproducible.

A *point* (:class:`Point`) is one evaluation point: a state and, for target ``q``, one of its
candidates; its text (:func:`point_text`) follows the shared context of the QVal paper
(Appendix C.1): task, bounded history of earlier actions, current state, and for ``q`` the
action and its resulting state.  Django-free.
"""

from __future__ import annotations

import functools
import hashlib
import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qval import schema
from qval.envs import registry

PROMPT_VERSION = "v1"
PROMPTS_DIR = Path(__file__).resolve().parent / "prompts" / PROMPT_VERSION
MAX_HISTORY_TURNS = 8
"""How many of the latest earlier actions a point shows (older ones are summarised as a count)."""


class PromptError(KeyError):
    """A template or environment text that is missing."""


@dataclass(frozen=True)
class Point:
    """One evaluation point: ``id`` is the candidate's id (target ``q``) or the state's (target ``v``)."""

    id: str
    state: schema.State
    candidate: schema.Candidate | None


@dataclass(frozen=True)
class EnvText:
    """The per-environment texts of the method context."""

    name: str
    task_description: str
    reward_description: str
    observation_space: str
    action_space: str
    max_steps: int
    criteria: tuple[dict[str, str], ...]
    action_label: str
    outcome_label: str


@functools.lru_cache(maxsize=None)
def template(name: str) -> string.Template:
    """The template ``prompts/<version>/<name>.txt``."""
    path = PROMPTS_DIR / f"{name}.txt"
    if not path.is_file():
        raise PromptError(f"no prompt template {path}")
    return string.Template(path.read_text(encoding="utf-8").rstrip("\n"))


def render(name: str, **slots: Any) -> str:
    """Template ``name`` with every ``${slot}`` filled (a missing slot is an error)."""
    return template(name).substitute({k: str(v) for k, v in slots.items()})


@functools.lru_cache(maxsize=None)
def env_text(environment: str) -> EnvText:
    """The texts of ``environment`` (a dataset manifest's ``environment``), from its folder."""
    texts = _environment_texts()
    if environment not in texts:
        raise PromptError(f"no method context for environment {environment!r}; known: {', '.join(sorted(texts))}")
    data = json.loads(texts[environment].read_text(encoding="utf-8"))
    return EnvText(name=environment, criteria=tuple(data.pop("criteria")), **data)


def _environment_texts() -> dict[str, Path]:
    """Environment name -> its texts of :data:`PROMPT_VERSION`, for every registered environment that has them."""
    paths = {name: entry.prompt_context(PROMPT_VERSION) for name, entry in registry.ENVIRONMENTS.items()}
    return {name: path for name, path in paths.items() if path.is_file()}


@functools.lru_cache(maxsize=None)
def prompt_hash() -> str:
    """SHA-256 over every file of the prompt version: the templates' folder and each environment's texts, named
    ``environments/<env>.json`` (names and bytes, in path order)."""
    files = {p.relative_to(PROMPTS_DIR).as_posix(): p for p in PROMPTS_DIR.rglob("*") if p.is_file()}
    files.update({f"environments/{name}.json": path for name, path in _environment_texts().items()})
    h = hashlib.sha256()
    for name in sorted(files, key=lambda n: n.split("/")):
        h.update(name.encode() + b"\0" + files[name].read_bytes())
    return h.hexdigest()


def environment_block(env: EnvText) -> str:
    """Task, reward, observation and action spaces."""
    return render("environment", task_description=env.task_description, reward_description=env.reward_description,
                  observation_space=env.observation_space, action_space=env.action_space)


def value_definition(target: str) -> str:
    """What Q(s, a) (target ``q``) or V(s) (target ``v``) means."""
    return render("value_q" if target == "q" else "value_v")


def quantity(target: str) -> str:
    """``Q(s, a)`` or ``V(s)``."""
    return "Q(s, a)" if target == "q" else "V(s)"


def history_text(state: schema.State, max_turns: int = MAX_HISTORY_TURNS) -> str:
    """The latest ``max_turns`` earlier actions, oldest first, with their turn numbers."""
    if not state.history:
        return "(none: this is the first turn)"
    shown = list(enumerate(state.history, 1))[-max_turns:]
    lines = [f"[{len(state.history) - len(shown)} earlier actions not shown]"] if len(shown) < len(state.history) else []
    return "\n".join(lines + [f"Turn {i}: {action}" for i, action in shown])


def point_text(env: EnvText, state: schema.State, candidate: schema.Candidate | None) -> str:
    """The shared context of one point: task, history, state and (with a candidate) action and next state."""
    actions = "" if candidate is None else render("point_action", action=candidate.action, next_state=candidate.next_state)
    return render("point", task=state.task, history=history_text(state), step=state.step + 1, max_steps=env.max_steps,
                  state=state.observation, action_sections=actions)


def points_of(states: list[schema.State], target: str) -> list[Point]:
    """The pointwise points of a split: the actor candidate of every state (``q``) or every state (``v``)."""
    if target == "q":
        return [Point(s.actor_candidate.id, s, s.actor_candidate) for s in states]
    return [Point(s.id, s, None) for s in states]


def answer_tags(n: int) -> str:
    """``<answer_1>…</answer_1> … <answer_n>…</answer_n>``."""
    return " ".join(f"<answer_{i}>…</answer_{i}>" for i in range(1, n + 1))


SHARED_TEMPLATES: tuple[str, ...] = ("environment", "value_q", "value_v", "point", "point_action")
"""Blocks every prompted method's templates are filled with (the shared method context)."""

METHOD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "direct-single": ("direct_system", "direct_user"),
    "direct-16": ("direct_system", "direct_user"),
    "direct-batched": ("direct_system", "direct_batched_user"),
    "direct-sequential": ("direct_system", "direct_sequential_user"),
    "gvl": ("gvl_system", "gvl_user"),
    "verifier": ("verifier_system", "verifier_user"),
    "Δbelief": ("belief_system", "belief_pre", "belief_post"),
    "codegen": ("codegen_system", "codegen_user"),
    "codegen-avg": ("codegen_system", "codegen_user"),
    "eureka": ("codegen_system", "codegen_user", "eureka_iteration", "eureka_feedback", "eureka_judge"),
    "sdpo": ("sdpo_system", "sdpo_student", "sdpo_teacher"),
    "sdpo-gt": ("sdpo_system", "sdpo_student", "sdpo_teacher"),
    "ranking": ("ranking_system", "ranking_user"),
}
"""The templates each prompted method renders (for method pages; image methods have none)."""


def method_templates(method: str) -> list[tuple[str, str]]:
    """``(name, text)`` of the templates ``method`` renders, then the shared blocks; empty for unprompted methods."""
    names = METHOD_TEMPLATES.get(method)
    if not names:
        return []
    return [(name, template(name).template) for name in (*names, *SHARED_TEMPLATES)]
