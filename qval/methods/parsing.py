"""Reading model replies: answer tags, permutations, yes/no logprob readouts.  Django-free."""

from __future__ import annotations

import math
import re
from typing import Sequence

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_WHOLE_NUMBER = re.compile(rf"^\s*({_NUMBER})\s*$")


def _number(text: str) -> float:
    match = _WHOLE_NUMBER.match(text)
    if not match:
        return math.nan
    value = float(match.group(1))
    return value if math.isfinite(value) else math.nan


def parse_answer(reply: str, tag: str = "answer") -> float:
    """The number in the last ``<tag>…</tag>`` of ``reply``; NaN when there is none or it is not one number."""
    found = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", reply, flags=re.S)
    return _number(found[-1]) if found else math.nan


def parse_numbered_answers(reply: str, n: int) -> list[float]:
    """The numbers in ``<answer_1>`` … ``<answer_n>`` (the last of each); NaN for a missing or bad one."""
    return [parse_answer(reply, f"answer_{i}") for i in range(1, n + 1)]


def parse_permutation(reply: str, k: int) -> list[int] | None:
    """The last comma-separated list in ``reply`` that is a permutation of 1..k (as 0-based indices), or None."""
    lists = re.findall(r"\d+(?:\s*,\s*\d+)+", reply) if k > 1 else re.findall(r"\d+", reply)
    for candidate in reversed(lists):
        numbers = [int(x) for x in re.findall(r"\d+", candidate)]
        if sorted(numbers) == list(range(1, k + 1)):
            return [x - 1 for x in numbers]
    return None


def log_yes_probability(yes_logprobs: Sequence[float], no_logprobs: Sequence[float]) -> float:
    """log p(Yes) − lse(log p(Yes), log p(No)), from the token logprobs of each answer (summed per answer)."""
    yes, no = sum(yes_logprobs), sum(no_logprobs)
    if not (math.isfinite(yes) and math.isfinite(no)):
        return math.nan
    top = max(yes, no)
    return yes - (top + math.log(math.exp(yes - top) + math.exp(no - top)))


def mean(values: Sequence[float]) -> float:
    """The mean of the finite values; NaN when there is none."""
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan
