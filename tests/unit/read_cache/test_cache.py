"""The read cache's bookkeeping: least recently used entries go first, its size in bytes holds, keys are apart;
which entries are answered with no round trip (fresh) while notifications arrive, and for how long."""

from __future__ import annotations

from datetime import UTC, datetime

from app.read_cache.cache import REMEMBERED_CHANGES, CachedJson, ResponseJsonCache

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


class Clock:
    """A clock the test moves: how long an entry is trusted is read from it, never waited for."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def listening_cache(clock: Clock, staleness_s: float = 1.0) -> ResponseJsonCache:
    cache = ResponseJsonCache(max_bytes=1000, staleness_s=staleness_s, clock=clock)
    cache.start_listening()
    return cache


def test_an_entry_read_while_listening_is_fresh_until_the_bound_then_checked_again() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    clock.now += 0.1
    cache.put("t", "a", NONE, entry(10), cache.ticket())
    clock.now += 0.99
    assert cache.fresh("t", "a", NONE) is not None
    clock.now += 0.01  # one second since the database said it was current: a read must ask again
    assert cache.fresh("t", "a", NONE) is None
    assert cache.get("t", "a", NONE) is not None
    cache.confirm("t", "a", NONE, cache.ticket())
    assert cache.fresh("t", "a", NONE) is not None


def test_nothing_is_fresh_without_notifications_nor_with_a_bound_of_zero() -> None:
    clock = Clock()
    silent = ResponseJsonCache(max_bytes=1000, staleness_s=1.0, clock=clock)
    silent.put("t", "a", NONE, entry(10), silent.ticket())
    assert silent.fresh("t", "a", NONE) is None
    assert silent.get("t", "a", NONE) is not None
    zero = listening_cache(clock, staleness_s=0.0)
    zero.put("t", "a", NONE, entry(10), zero.ticket())
    assert zero.fresh("t", "a", NONE) is None
    # Kept with no ticket: checked before it is first answered, listening or not.
    listening = listening_cache(clock)
    listening.put("t", "a", NONE, entry(10))
    assert listening.fresh("t", "a", NONE) is None


def test_a_notification_drops_every_include_of_its_response_and_only_those() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    clock.now += 0.1
    for includes in (NONE, frozenset({"x"})):
        cache.put("t", "a", includes, entry(10), cache.ticket())
    cache.put("t", "b", NONE, entry(10), cache.ticket())
    cache.changed("t", "a")
    assert cache.get("t", "a", NONE) is None and cache.get("t", "a", frozenset({"x"})) is None
    assert cache.fresh("t", "b", NONE) is not None
    assert (len(cache), cache.size_bytes) == (1, 10)


def test_a_read_begun_before_a_notification_of_its_row_is_kept_but_checked_before_it_is_trusted() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    clock.now += 0.1
    before_a, before_b = cache.ticket(), cache.ticket()
    cache.changed("t", "a")  # arrives while both reads are in flight
    cache.put("t", "a", NONE, entry(10), before_a)
    cache.put("t", "b", NONE, entry(10), before_b)
    assert cache.fresh("t", "a", NONE) is None and cache.get("t", "a", NONE) is not None
    assert cache.fresh("t", "b", NONE) is not None  # another row's notification says nothing of this one
    cache.confirm("t", "a", NONE, before_a)  # a check begun before the change proves nothing either
    assert cache.fresh("t", "a", NONE) is None
    cache.confirm("t", "a", NONE, cache.ticket())
    assert cache.fresh("t", "a", NONE) is not None


def test_a_read_older_than_every_notification_remembered_is_never_trusted() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    clock.now += 0.1
    ticket = cache.ticket()
    for number in range(REMEMBERED_CHANGES + 1):
        cache.changed("t", f"other{number}")
    cache.put("t", "a", NONE, entry(10), ticket)
    assert cache.fresh("t", "a", NONE) is None


def test_entries_checked_before_the_listener_started_or_while_it_was_down_are_checked_again() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    clock.now += 0.1
    cache.put("t", "a", NONE, entry(10), cache.ticket())
    cache.stop_listening()  # a change made now is never notified
    assert cache.fresh("t", "a", NONE) is None
    clock.now += 0.1
    cache.put("t", "b", NONE, entry(10), cache.ticket())
    clock.now += 0.1
    cache.start_listening()
    clock.now += 0.1
    assert cache.fresh("t", "a", NONE) is None and cache.fresh("t", "b", NONE) is None
    cache.confirm("t", "a", NONE, cache.ticket())
    assert cache.fresh("t", "a", NONE) is not None


def test_a_list_page_is_kept_until_any_response_of_its_tenant_changes() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    clock.now += 0.1
    cache.put_page("t", "first page", b"[1]", cache.ticket())
    cache.put_page("u", "first page", b"[2]", cache.ticket())
    assert (cache.fresh_page("t", "first page"), cache.fresh_page("t", "other page")) == (b"[1]", None)
    cache.changed("u", "a")  # another tenant's response: this tenant's pages hold
    assert (cache.fresh_page("t", "first page"), cache.fresh_page("u", "first page")) == (b"[1]", None)
    cache.changed("t", "new")  # created, changed or deleted: it may belong on the page now, or no longer
    assert cache.fresh_page("t", "first page") is None
    clock.now += 0.1
    cache.put_page("t", "first page", b"[3]", cache.ticket())
    clock.now += 1.0
    assert cache.fresh_page("t", "first page") is None  # past the bound: read again


def test_a_list_page_read_before_a_change_of_its_tenant_or_while_deaf_is_not_kept() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    clock.now += 0.1
    ticket = cache.ticket()
    cache.changed("t", "a")
    cache.put_page("t", "page", b"[]", ticket)
    assert cache.fresh_page("t", "page") is None and len(cache) == 0
    cache.stop_listening()
    cache.put_page("t", "page", b"[]", cache.ticket())
    assert len(cache) == 0
