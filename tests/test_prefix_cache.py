"""Prompts read before, kept as blocks (qval.prefix_cache): which blocks a new prompt starts after."""

from __future__ import annotations

from qval.prefix_cache import Block, PrefixCache

BASE = list(range(100, 140))  # 40 tokens


def blocks(ids: list[int], size: int, logprobs: bool = False, k: int = 0) -> list[Block]:
    """Stand-in blocks of ``ids`` (the store never looks inside them), naming the tokens they hold."""
    return [Block(((f"keys{ids[i:i + size]}", f"values{ids[i:i + size]}"),),
                  tuple(ids[i + 1:i + size + 1]) if logprobs else None, k)
            for i in range(0, len(ids) - size, size)]


def test_a_prompt_starts_after_the_longest_run_of_kept_blocks_it_begins_with() -> None:
    cache = PrefixCache(block=8)
    cache.add(BASE[:30] + [1], blocks(BASE[:30] + [1], 8))  # three usable blocks: 0-7, 8-15, 16-23
    found = cache.find(BASE)
    assert [b.layers[0][0] for b in found] == [f"keys{BASE[i:i + 8]}" for i in (0, 8, 16)]
    assert cache.hits == 1 and cache.skipped == 24
    assert len(cache.find(BASE[:24] + [7] * 10)) == 2  # the token after block 16-23 differs: it is not used
    assert cache.find([5] + BASE) == [] and cache.hits == 2


def test_a_prompt_always_reads_its_last_token() -> None:
    cache = PrefixCache(block=8)
    cache.add(BASE, blocks(BASE, 8))
    assert len(cache) == 4  # 40 tokens: the fifth block would hold the last token
    assert len(cache.find(BASE)) == 4 and len(cache.find(BASE[:33])) == 4
    assert len(cache.find(BASE[:32])) == 3  # block 24-31 would end at the prompt's last token


def test_blocks_that_prompts_share_are_kept_once() -> None:
    cache = PrefixCache(block=8)
    for tail in range(5):
        ids = BASE[:17] + [tail] * 19
        cache.add(ids, blocks(ids, 8))
    assert len(cache) == 2 + 5 * 2  # the two shared blocks once, and each prompt's own two (of 36 tokens: 4)
    assert len(cache.find(BASE[:17] + [3] * 19)) == 4


def test_an_echo_request_needs_kept_logprobs_for_its_own_k() -> None:
    cache = PrefixCache(block=8)
    cache.add(BASE, blocks(BASE, 8))
    assert cache.find(BASE, echo_k=0) == []
    cache.add(BASE[:20], blocks(BASE[:20], 8, logprobs=True, k=2))  # blocks 0-7 and 8-15 again, with logprobs
    assert cache.find(BASE, echo_k=0) == []
    found = cache.find(BASE, echo_k=2)
    assert len(found) == 2 and found[1].logprobs == tuple(BASE[9:17])  # tokens 9-16: scored by positions 8-15
    assert len(cache.find(BASE)) == 4  # no echo: every kept block
    cache.add(BASE, blocks(BASE, 8))  # read again without echo: the blocks with logprobs stay
    assert len(cache.find(BASE, echo_k=2)) == 2


def test_the_least_recently_used_blocks_go_first_and_a_prompts_first_blocks_last() -> None:
    cache = PrefixCache(size=4, block=8)
    a, b = [1] * 17 + BASE, [2] * 17 + BASE
    cache.add(a[:17], blocks(a[:17], 8))  # a's two blocks
    cache.add(b[:17], blocks(b[:17], 8))  # b's two blocks
    assert len(cache.find(a)) == 2  # a is used: b's blocks are now the oldest
    cache.add(a[:25], blocks(a[:25], 8))  # a's third block: one of b's goes, its second block first
    assert len(cache) == 4 and len(cache.find(a)) == 3
    assert len(cache.find(b)) == 1  # b's first block is still there


def test_size_zero_keeps_nothing() -> None:
    cache = PrefixCache(size=0, block=8)
    cache.add(BASE, blocks(BASE, 8))
    assert cache.find(BASE) == [] and len(cache) == 0
