"""The seven method families of QVal v1.0, their colours, and which of the 21 methods of the
paper belong to each.

Names, order and colours are the reference's (Okabe–Ito palette, colour-blind safe).  A
family is stored by its slug (:attr:`Family.slug`) and shown by its name.  The site adds
:data:`LEARNED` (value functions it trains itself, :mod:`qval.learned`); methods of our users that
fit none of these, and the site's reference methods (:mod:`qval.methods.reference`), are
``other``.  Nothing here knows about Django.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One method family: stored ``slug``, display ``name``, plot ``colour`` and its methods."""

    slug: str
    name: str
    colour: str
    methods: tuple[str, ...]


FAMILIES: tuple[Family, ...] = (
    Family("direct", "Direct", "#0072B2",
           ("gvl", "direct-single", "direct-batched", "direct-sequential", "direct-16")),
    Family("code", "Code", "#D55E00", ("eureka", "codegen", "codegen-avg")),
    Family("self-distillation", "Self-Distillation", "#009E73", ("sdpo", "sdpo-gt")),
    Family("intrinsic", "Intrinsic", "#E69F00", ("verifier", "Δbelief")),
    Family("ranking", "Ranking", "#CC79A7", ("ranking",)),
    Family("embedding", "Embedding", "#56B4E9", ("vlm-rm", "vlm-rm-cos", "vlm-sor", "vlm-sor-softmax")),
    Family("pre-trained", "Pre-trained", "#999999", ("vip", "liv-cos", "liv-l2", "liv-txt")),
)
"""The reference's families, in the reference's order."""

LEARNED: Family = Family("learned", "Learned", "#F0E442", ("best-of-q", "qlass", "amc-value"))
"""Value functions the platform trains on a dataset's train split (:mod:`qval.learned`); not one of
the reference's seven, so it comes after them (Okabe–Ito yellow)."""

OTHER: Family = Family("other", "Other", "#000000", ())
"""Methods outside the seven families (users' methods and the reference methods)."""

ALL: tuple[Family, ...] = (*FAMILIES, LEARNED, OTHER)
"""Every family a method on this site can have, in display order."""

_BY_SLUG: dict[str, Family] = {f.slug: f for f in ALL}
_BY_NAME: dict[str, Family] = {f.name: f for f in ALL}
_BY_METHOD: dict[str, Family] = {m: f for f in ALL for m in f.methods}

FAMILY_SLUGS: frozenset[str] = frozenset(f.slug for f in ALL)
"""Slugs a built-in method may declare (:func:`qval.methods.registry.method`): ``other`` is the reference
methods' (:mod:`qval.methods.reference`)."""

TABLE1_SOURCES: dict[str, str] = {
    "ranking": "Baseline", "direct-16": "Baseline", "direct-batched": "Baseline", "direct-sequential": "Baseline",
    "direct-single": "Baseline", "gvl": "Ma et al., 2024", "verifier": "Kwok et al., 2026",
    "Δbelief": "Auzina et al., 2026", "sdpo": "Hübötter et al., 2026", "sdpo-gt": "Extension",
    "vip": "Ma et al., 2022", "liv-cos": "Ma et al., 2023a", "liv-l2": "Ma et al., 2023a", "liv-txt": "Ma et al., 2023a",
    "vlm-sor-softmax": "Baumli et al., 2023", "vlm-sor": "Baumli et al., 2023", "vlm-rm-cos": "Rocamonde et al., 2024",
    "vlm-rm": "Rocamonde et al., 2024", "eureka": "Ma et al., 2023b", "codegen": "Li et al., 2024",
    "codegen-avg": "Extension",
}
"""Each of the paper's 21 methods with the source its Table 1 gives: ``Baseline`` (a simple baseline the paper
introduces), ``Extension`` (the paper's own stronger probe within a family) or the cited work it adapts."""

CHOICES: list[tuple[str, str]] = [(f.slug, f.name) for f in ALL]
"""``(slug, name)`` pairs, e.g. for a Django ``choices``."""


def get(key: str) -> Family:
    """The family with slug or display name ``key``; ``KeyError`` naming the known ones."""
    family = _BY_SLUG.get(key) or _BY_NAME.get(key)
    if family is None:
        raise KeyError(f"unknown family {key!r}; expected one of {', '.join(_BY_SLUG)}")
    return family


def of_method(method: str) -> Family:
    """The family of a built-in method (the paper's 21 and the learned ones), :data:`OTHER` for any other name."""
    return _BY_METHOD.get(method, OTHER)


def origin(method: str) -> str:
    """``baseline``, ``extension`` or ``literature`` as the paper's Table 1 says (:data:`TABLE1_SOURCES`),
    ``other`` for a method the paper does not list."""
    source = TABLE1_SOURCES.get(method)
    if source is None:
        return "other"
    return source.lower() if source in ("Baseline", "Extension") else "literature"


def colour(key: str) -> str:
    """Plot colour of a family given by slug or name (black for unknown ones)."""
    family = _BY_SLUG.get(key) or _BY_NAME.get(key)
    return family.colour if family else OTHER.colour
