"""The prefix cache's bookkeeping: longest shared prefix wins, LRU eviction by bytes, superseded entries go."""

from __future__ import annotations

import numpy as np

from app.generation.prefix_cache import PrefixCache, common_prefix_length


def test_common_prefix_length() -> None:
    assert common_prefix_length(np.array([1, 2, 3]), np.array([1, 2, 4])) == 2
    assert common_prefix_length(np.array([1, 2]), np.array([1, 2, 3])) == 2
    assert common_prefix_length(np.array([5]), np.array([1])) == 0


def test_the_entry_sharing_the_longest_prefix_is_chosen_even_when_it_diverges_later() -> None:
    cache = PrefixCache(capacity_bytes=1000)
    cache.put("t", [1, 2, 3, 4], b"a")
    cache.put("t", [1, 2, 9, 9, 9], b"b")
    assert cache.best_match("t", [7, 8]) is None
    match = cache.best_match("t", [1, 2, 3, 4, 5, 6])
    assert match is not None and match[0] == 4 and match[1].data == b"a"
    # Diverging after 3 shared tokens still serves those 3.
    match = cache.best_match("t", [1, 2, 9, 8])
    assert match is not None and match[0] == 3 and match[1].data == b"b"


def test_least_recently_used_entries_go_first_and_the_size_stays_bounded() -> None:
    cache = PrefixCache(capacity_bytes=10)
    cache.put("t", [1], b"xxxx")
    cache.put("t", [2], b"yyyy")
    assert cache.best_match("t", [1]) is not None  # [1] is now the most recently used
    cache.put("t", [3], b"zzzz")
    assert cache.size_bytes == 8 and len(cache) == 2
    assert cache.best_match("t", [2]) is None
    assert cache.best_match("t", [1]) is not None and cache.best_match("t", [3]) is not None
    cache.put("t", [4], b"w" * 11)  # larger than the whole cache: not kept, nothing evicted for it
    assert len(cache) == 2


def test_an_entry_that_a_longer_one_extends_is_dropped() -> None:
    cache = PrefixCache(capacity_bytes=100)
    cache.put("t", [1, 2], b"turn one")
    cache.put("t", [1, 2, 3, 4], b"turn two")
    assert len(cache) == 1 and cache.size_bytes == len(b"turn two")
    cache.put("t", [1, 5], b"branch")
    assert len(cache) == 2


def test_an_entry_serves_only_its_own_scope() -> None:
    cache = PrefixCache(capacity_bytes=100)
    cache.put("tenant-a", [1, 2, 3], b"a's prompt")
    assert cache.best_match("tenant-b", [1, 2, 3, 4]) is None
    # Another scope's longer entry neither serves nor supersedes it.
    cache.put("tenant-b", [1, 2, 3, 4], b"b's prompt")
    assert len(cache) == 2
    match = cache.best_match("tenant-a", [1, 2, 3, 4])
    assert match is not None and match[0] == 3 and match[1].data == b"a's prompt"
