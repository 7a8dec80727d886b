"""The seven method families of QVal and their built-in members (names as the reference uses them).

A minimal version (the lead reconciles it with the leaderboard's family list): ``slug`` is what
``leaderboard.Method.family`` stores, ``label`` what the reference's result tables show.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One method family."""

    slug: str
    label: str
    members: tuple[str, ...]


FAMILIES: tuple[Family, ...] = (
    Family("direct", "Direct", ("direct-single", "direct-batched", "direct-sequential", "direct-16", "gvl")),
    Family("code", "Code", ("codegen", "codegen-avg", "eureka")),
    Family("self-distillation", "Self-Distillation", ("sdpo", "sdpo-gt")),
    Family("intrinsic", "Intrinsic", ("verifier", "Δbelief")),
    Family("ranking", "Ranking", ("ranking",)),
    Family("embedding", "Embedding", ("vlm-rm", "vlm-rm-cos", "vlm-sor", "vlm-sor-softmax")),
    Family("pre-trained", "Pre-trained", ("vip", "liv-cos", "liv-l2", "liv-txt")),
)
"""In the reference's order."""

FAMILY_SLUGS: frozenset[str] = frozenset(f.slug for f in FAMILIES)


def family_of(method: str) -> Family | None:
    """The family a built-in method belongs to, or None."""
    return next((f for f in FAMILIES if method in f.members), None)
