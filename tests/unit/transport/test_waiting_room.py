"""Embedded mode's waiting room admits jobs in the fair order as places free: each tenant's jobs of a class a flow,
the flows in turn by their classes' weights (a tie to the more urgent class), each tenant's jobs first in, first
out, the place kept for interactive jobs to them only; a waiter that gives up passes its turn on."""

from __future__ import annotations

import asyncio

import pytest

from app.generation.job import GenerationJob, JobClass
from app.generation.types import SamplingParams
from app.transport.fair_order import WaitingRoom


def job(name: str, tenant: str, job_class: JobClass = "interactive") -> GenerationJob:
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=4)
    return GenerationJob(name, [1], sampling, {}, True, False, tenant=tenant, model="m", job_class=job_class)


async def test_the_waiting_room_admits_in_the_fair_order_as_places_free() -> None:
    room = WaitingRoom(places=1)
    started: list[str] = []
    release: dict[str, asyncio.Event] = {}

    async def run(item: GenerationJob) -> None:
        release[item.response_id] = asyncio.Event()
        async with room.place(item):
            started.append(item.response_id)
            await release[item.response_id].wait()

    jobs = [
        job("a-bg0", "a", "background"),
        job("a-bg1", "a", "background"),
        job("a-bg2", "a", "background"),
        job("c-batch0", "c", "batch"),
        job("b-bg0", "b", "background"),
        job("b-int0", "b"),
    ]
    tasks = []
    for item in jobs:  # each waits in turn, in this order of arrival
        tasks.append(asyncio.create_task(run(item)))
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert started == ["a-bg0"]
    assert (room.running, room.waiting) == (1, 5)
    expected = ["a-bg0", "b-int0", "b-bg0", "c-batch0", "a-bg1", "a-bg2"]
    for index, name in enumerate(expected):
        assert started == expected[: index + 1]
        release[name].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert (room.running, room.waiting) == (0, 0)


async def test_a_waiter_that_gives_up_leaves_its_turn_to_the_next() -> None:
    room = WaitingRoom(places=1)
    first = job("first", "a")
    async with room.place(first):
        gone = asyncio.create_task(room.place(job("gone", "b")).__aenter__())
        await asyncio.sleep(0)
        admitted = asyncio.Event()

        async def next_one() -> None:
            async with room.place(job("next", "c")):
                admitted.set()

        waiting = asyncio.create_task(next_one())
        await asyncio.sleep(0)
        assert room.waiting == 2
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert room.waiting == 1
    await asyncio.wait_for(admitted.wait(), 1)
    await waiting
    assert (room.running, room.waiting) == (0, 0)


async def test_a_place_handed_to_a_waiter_that_went_meanwhile_is_passed_on() -> None:
    room = WaitingRoom(places=1)
    entered = asyncio.Event()
    async with room.place(job("first", "a")):
        gone = asyncio.create_task(room.place(job("gone", "b")).__aenter__())
        await asyncio.sleep(0)

        async def next_one() -> None:
            async with room.place(job("next", "c")):
                entered.set()

        waiting = asyncio.create_task(next_one())
        await asyncio.sleep(0)
    # The place went to "gone" (its turn is set) but it is cancelled before it wakes: "next" gets it.
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    await asyncio.wait_for(entered.wait(), 1)
    await waiting
    assert (room.running, room.waiting) == (0, 0)


async def test_no_places_means_no_waiting() -> None:
    room = WaitingRoom(places=0)
    async with room.place(job("a", "a")), room.place(job("b", "b")), room.place(job("c", "c")):
        assert (room.running, room.waiting) == (3, 0)


async def test_one_place_is_kept_for_interactive_jobs() -> None:
    room = WaitingRoom(places=3)
    held: dict[str, asyncio.Event] = {}
    started: list[str] = []

    async def run(item: GenerationJob) -> None:
        held[item.response_id] = asyncio.Event()
        async with room.place(item):
            started.append(item.response_id)
            await held[item.response_id].wait()

    tasks = [asyncio.create_task(run(job(f"a-bg{number}", "a", "background"))) for number in range(3)]
    tasks.append(asyncio.create_task(run(job("c-batch0", "c", "batch"))))
    await asyncio.sleep(0)
    # Background and batch work takes all places but one.
    assert (started, room.running, room.waiting) == (["a-bg0", "a-bg1"], 2, 2)
    tasks.append(asyncio.create_task(run(job("b-int0", "b"))))
    await asyncio.sleep(0)
    assert started[-1] == "b-int0"  # at once, beside them
    tasks.append(asyncio.create_task(run(job("b-int1", "b"))))
    await asyncio.sleep(0)
    assert room.waiting == 3  # every place is taken now
    held["a-bg0"].set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert started[-1] == "c-batch0"  # it waited under an earlier tag than b-int1: its turn first
    held["b-int0"].set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert started[-1] == "b-int1"  # two deferrable jobs run: the free place is the kept one, an interactive job's
    held["a-bg1"].set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert started[-1] == "a-bg2"
    held["b-int1"].set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(run(job("a-bg3", "a", "background"))))
    await asyncio.sleep(0)
    # A place is free, but it is the one kept for interactive work.
    assert (room.running, room.running_deferrable, room.waiting) == (2, 2, 1)
    held["a-bg2"].set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert started[-1] == "a-bg3"
    for name in ("c-batch0", "a-bg3"):
        held[name].set()
    await asyncio.gather(*tasks)
    assert started == ["a-bg0", "a-bg1", "b-int0", "c-batch0", "b-int1", "a-bg2", "a-bg3"]
    assert (room.running, room.running_deferrable, room.waiting) == (0, 0, 0)


class Holders:
    """Jobs holding places of `room` until released; records the preemptions asked for, and grants those in
    `willing` (the jobs that can be preempted now)."""

    def __init__(self, places: int, willing: set[str] | None = None) -> None:
        self.asked: list[str] = []
        self.willing = willing
        self.room = WaitingRoom(places, self.preempt)
        self.started: list[str] = []
        self.release: dict[str, asyncio.Event] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def preempt(self, response_id: str) -> bool:
        self.asked.append(response_id)
        return self.willing is None or response_id in self.willing

    async def hold(self, item: GenerationJob, resumed: bool = False) -> None:
        self.release[item.response_id] = asyncio.Event()
        async with self.room.place(item, resumed=resumed):
            self.started.append(item.response_id)
            await self.release[item.response_id].wait()

    async def add(self, *items: GenerationJob, resumed: bool = False) -> None:
        for item in items:
            self.tasks.append(asyncio.create_task(self.hold(item, resumed)))
            await asyncio.sleep(0)

    async def end(self, name: str) -> None:
        self.release[name].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    async def close(self) -> None:
        for event in self.release.values():
            event.set()
        await asyncio.gather(*self.tasks)
        assert (self.room.running, self.room.running_deferrable, self.room.waiting) == (0, 0, 0)


async def test_an_interactive_job_of_a_tenant_holding_no_place_preempts_the_youngest_job_of_the_greediest() -> None:
    holders = Holders(places=4)
    await holders.add(
        job("c-bg0", "c", "background"), job("a-bg0", "a", "background"), job("a-bg1", "a", "batch"), job("a-int", "a")
    )
    assert holders.started == ["c-bg0", "a-bg0", "a-bg1", "a-int"]
    await holders.add(job("b-int", "b"))
    # Three tenants: a share of one place each. Alpha holds three: its youngest background or batch job goes.
    assert holders.asked == ["a-bg1"]
    # Its place is beta's job's at once (the engine starts it as soon as a-bg1's sequence stops).
    assert holders.started[-1] == "b-int"
    assert (holders.room.running, holders.room.running_deferrable, holders.room.waiting) == (4, 2, 0)
    await holders.end("a-bg1")  # its run ends (it handed its job back): nothing more is freed
    assert (holders.room.running, holders.room.waiting) == (4, 0)
    await holders.add(job("b-int2", "b"))
    assert holders.asked == ["a-bg1"]  # beta holds its share now: it waits for a place as any job does
    await holders.close()


async def test_a_job_that_cannot_give_its_place_back_is_passed_over() -> None:
    holders = Holders(places=3, willing={"a-bg0"})
    await holders.add(job("a-bg0", "a", "background"), job("a-bg1", "a", "background"), job("a-int", "a"))
    await holders.add(job("b-int", "b"))
    assert holders.asked == ["a-bg1", "a-bg0"]  # the youngest could not (a tool call, say): the next one goes
    assert holders.started[-1] == "b-int"
    await holders.add(job("c-int", "c"))
    # Another tenant holding none: alpha still holds more than its share (one of three), but a-bg1 still cannot.
    assert holders.asked == ["a-bg1", "a-bg0", "a-bg1"]
    assert holders.room.waiting == 1
    await holders.end("a-bg0")
    assert holders.room.waiting == 1  # a-bg0's place went to b-int already
    await holders.end("a-int")
    assert holders.started[-1] == "c-int"
    await holders.close()


async def test_a_tenant_alone_never_preempts_its_own_jobs_and_a_resumed_job_goes_first_of_its_tenants() -> None:
    holders = Holders(places=2)
    await holders.add(job("a-bg0", "a", "background"), job("a-int0", "a"), job("a-bg1", "a", "background"))
    await holders.add(job("a-int1", "a"))
    assert holders.asked == []  # one tenant: its share is every place; its interactive jobs have the kept one
    await holders.add(job("a-bg-resumed", "a", "background"), resumed=True)
    await holders.end("a-int0")
    assert holders.started[-1] == "a-int1"  # interactive first
    await holders.end("a-bg0")
    assert holders.started[-1] == "a-bg-resumed"  # before a-bg1, which came first
    await holders.end("a-bg-resumed")
    assert holders.started[-1] == "a-bg1"
    await holders.close()


async def test_a_place_freed_by_a_preemption_goes_to_an_interactive_job_not_to_the_turn_of_another_class() -> None:
    holders = Holders(places=6)
    await holders.add(*(job(f"a-bg{number}", "a", "background") for number in range(5)), job("a-int0", "a"))
    await holders.add(job("c-bg0", "c", "background"))  # waits, under the tag being served
    await holders.add(job("b-int0", "b"), job("b-int1", "b"))
    # Three tenants: two places each. Beta's second job waits under a later tag than c-bg0 (its flow's second),
    # but the place alpha gives back for it is beta's, not gamma's background job's.
    assert holders.asked == ["a-bg4", "a-bg3"]
    assert holders.started[-2:] == ["b-int0", "b-int1"]
    assert "c-bg0" not in holders.started
    await holders.close()
