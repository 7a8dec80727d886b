"""Prompts read before (qval.prefix_cache): which stored prompt a new one starts from, and how much of it."""

from __future__ import annotations

from qval.prefix_cache import Entry, PrefixCache, shared_length


def entry(ids: list[int], logprobs: bool = False, k: int = 0) -> Entry:
    return Entry(tuple(ids), ((f"keys{len(ids)}", f"values{len(ids)}"),), tuple(ids) if logprobs else None, k)


BASE = list(range(100, 140))  # 40 tokens


def test_the_longest_shared_prompt_is_used_up_to_one_token_before_they_differ() -> None:
    cache = PrefixCache(block=1)
    short, long = entry(BASE[:20] + [1, 2]), entry(BASE[:30] + [3])
    cache.add(short)
    cache.add(long)
    found, used = cache.find(BASE)
    assert found is long and used == 29  # shares 30 tokens: the 30th is read again
    assert cache.hits == 1 and cache.skipped == 29


def test_a_prompt_equal_to_a_stored_one_still_reads_its_last_token() -> None:
    cache = PrefixCache(block=1)
    cache.add(entry(BASE))
    assert cache.find(BASE)[1] == len(BASE) - 1
    assert cache.find(BASE[:25])[1] == 24  # a prompt inside a stored one


def test_only_whole_blocks_are_used() -> None:
    cache = PrefixCache(block=16)
    cache.add(entry(BASE[:16] + [7]))
    assert cache.find(BASE[:16] + [9, 9]) == (None, 0)  # 15 tokens could be skipped: less than a block
    cache.add(entry(BASE[:35] + [7]))
    assert cache.find(BASE)[1] == 32  # 34 could be skipped: two blocks
    assert cache.find(BASE[:33])[1] == 32 and cache.find(BASE[:32])[1] == 16  # the last token is always read
    assert shared_length([1, 2, 3], [1, 2, 4, 5]) == 2


def test_an_echo_request_needs_stored_logprobs_for_its_own_k() -> None:
    cache = PrefixCache(block=1)
    cache.add(entry(BASE))
    assert cache.find(BASE, echo_k=0) == (None, 0)
    with_logprobs = entry(BASE[:35], logprobs=True, k=2)
    cache.add(with_logprobs)
    assert cache.find(BASE, echo_k=0) == (None, 0)
    assert cache.find(BASE, echo_k=2) == (with_logprobs, 34)
    assert cache.find(BASE)[0].ids == tuple(BASE)  # no echo: the longer one without logprobs


def test_the_least_recently_used_goes_first_and_logprobs_are_not_replaced_by_none() -> None:
    cache = PrefixCache(size=2, block=1)
    a, b, c = entry([1] * 20 + BASE), entry([2] * 20 + BASE), entry([3] * 20 + BASE)
    cache.add(a)
    cache.add(b)
    assert cache.find([1] * 20 + [0])[0] is a  # a is used, so b is now the oldest
    cache.add(c)
    assert cache.find([2] * 20 + [0]) == (None, 0)
    assert cache.find([1] * 20 + [0])[0] is a and cache.find([3] * 20 + [0])[0] is c
    echoed = entry([1] * 20 + BASE, logprobs=True)
    cache.add(echoed)
    cache.add(entry([1] * 20 + BASE))  # read again without echo: the entry with logprobs stays
    assert cache.find([1] * 20 + [0], echo_k=0)[0] is echoed


def test_size_zero_keeps_nothing() -> None:
    cache = PrefixCache(size=0)
    cache.add(entry(BASE))
    assert cache.find(BASE) == (None, 0)
