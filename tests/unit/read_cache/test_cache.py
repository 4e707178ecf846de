"""The read cache's bookkeeping: least recently used entries go first, its size in bytes holds, keys are apart."""

from __future__ import annotations

from datetime import UTC, datetime

from app.read_cache.cache import CachedJson, ResponseJsonCache

VERSION = datetime(2026, 11, 27, tzinfo=UTC)
NONE: frozenset[str] = frozenset()


def entry(size: int) -> CachedJson:
    return CachedJson(VERSION, b"x" * size)


def test_the_least_recently_used_entry_goes_first_when_full() -> None:
    cache = ResponseJsonCache(max_bytes=30)
    cache.put("t", "a", NONE, entry(10))
    cache.put("t", "b", NONE, entry(10))
    cache.put("t", "c", NONE, entry(10))
    assert cache.get("t", "a", NONE) is not None  # a is now the most recently used
    cache.put("t", "d", NONE, entry(10))
    assert cache.get("t", "b", NONE) is None
    assert [cache.get("t", key, NONE) is not None for key in "acd"] == [True, True, True]
    assert cache.size_bytes == 30


def test_a_replaced_or_discarded_entry_gives_its_bytes_back() -> None:
    cache = ResponseJsonCache(max_bytes=100)
    cache.put("t", "a", NONE, entry(40))
    cache.put("t", "a", NONE, entry(10))
    assert (len(cache), cache.size_bytes) == (1, 10)
    cache.discard("t", "a", NONE)
    cache.discard("t", "a", NONE)
    assert (len(cache), cache.size_bytes) == (0, 0)


def test_tenants_and_includes_are_separate_keys() -> None:
    cache = ResponseJsonCache(max_bytes=100)
    cache.put("alpha", "a", NONE, entry(1))
    assert cache.get("beta", "a", NONE) is None
    assert cache.get("alpha", "a", frozenset({"reasoning.encrypted_content"})) is None


def test_an_entry_larger_than_the_cache_or_a_cache_of_zero_keeps_nothing() -> None:
    small = ResponseJsonCache(max_bytes=5)
    small.put("t", "a", NONE, entry(6))
    off = ResponseJsonCache(max_bytes=0)
    off.put("t", "a", NONE, entry(1))
    assert (len(small), len(off)) == (0, 0)
