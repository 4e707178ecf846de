"""The KV pool's policy without a model: who may start beside running sequences, who is pushed out, and in which
order pushed-out requests go on."""

from __future__ import annotations

from app.generation.kv.pool import GROWTH_TOKENS, KvPool
from app.generation.kv.slots import Slot
from app.generation.request import GenerationRequest
from app.generation.types import SamplingParams


def request(tokens: int) -> GenerationRequest:
    return GenerationRequest(list(range(tokens)), SamplingParams(0, 1, None), lambda output: None, "tenant")


def running(seq_id: int, cells: int, arrival: int) -> Slot:
    slot = Slot(seq_id, tokens=list(range(cells - 1)), pending=[7], arrival=arrival)
    slot.request = request(10)
    return slot


def test_a_request_starts_only_with_room_for_every_sequence_to_grow() -> None:
    pool = KvPool(1000)
    others = [running(0, 300, 0), running(1, 200, 1)]
    room = 1000 - 500 - 3 * GROWTH_TOKENS
    assert pool.fits(others, request(room))
    assert not pool.fits(others, request(room + 1))
    # Nothing running: it starts whatever its size (a prompt larger than the pool ends with `length`).
    assert pool.fits([], request(5000))
    assert KvPool(0).fits(others, request(5000))  # no pool: each sequence has a window of its own


def test_the_youngest_is_pushed_out_never_the_last_one_running() -> None:
    pool = KvPool(1000)
    old, young, middle = running(0, 100, 3), running(1, 50, 9), running(2, 80, 5)
    assert pool.victim([old, young, middle]) is young
    assert pool.victim([old]) is None
    assert KvPool(0).victim([old, young]) is None


def test_pushed_out_requests_go_on_oldest_first_with_what_they_wrote() -> None:
    pool = KvPool(1000)
    old, young = running(0, 100, 3), running(1, 50, 9)
    young.produced, young.budget, young.cached = 12, 40, 6
    first = pool.push_out(young)
    second = pool.push_out(old)
    assert list(pool.front) == [second, first]
    assert pool.preempted == 2
    paused = pool.paused[first]
    assert paused.sequence == young.tokens + young.pending
    assert pool.demand(first) == 50 and pool.demand(request(20)) == 20
    fresh = Slot(3)
    paused.resume(fresh)
    assert (fresh.produced, fresh.budget, fresh.cached, fresh.arrival) == (12, 40, 6, 9)
