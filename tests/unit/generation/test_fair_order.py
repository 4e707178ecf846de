"""The fair order waiting jobs are served in: each tenant's jobs of a class are a flow, waiting under start tags
(`start_tag`), so that the flows take turns by their classes' weights, a tie going to the more urgent class
(interactive, background, batch), each tenant's items first in, first out."""

from __future__ import annotations

from collections import Counter

import pytest

from app.generation.job import SHARE_SCALE, ClassWeights, FairOrder, GenerationJob, start_tag
from app.generation.types import SamplingParams


def test_start_tags_space_a_flows_jobs_by_its_step_and_start_an_idle_flow_at_the_clock() -> None:
    assert start_tag(7, None, 50) == 7  # a new flow: the tag being served
    assert start_tag(7, 0, 50) == 50  # a waiting flow: one step after its last job
    assert start_tag(700, 0, 50) == 700  # an idle flow saved no credit: the clock passed it
    weights = ClassWeights(interactive=4, background=1, batch=2)
    assert (weights.step("interactive"), weights.step("background"), weights.step("batch")) == (
        SHARE_SCALE // 4,
        SHARE_SCALE,
        SHARE_SCALE // 2,
    )


def test_fair_order_takes_turns_between_flows_a_tie_to_the_more_urgent_class() -> None:
    order: FairOrder[str] = FairOrder()
    for number in range(4):
        order.push("background", "a", f"a-bg{number}")
    order.push("batch", "c", "c-batch0")
    order.push("background", "b", "b-bg0")
    order.push("background", "b", "b-bg1")
    order.push("interactive", "b", "b-int0")
    order.push("interactive", "a", "a-int0")
    assert len(order) == 9
    taken = [order.pop() for _ in range(len(order))]
    # Every flow's first job shares the first tag (the more urgent class first); then a's and b's background
    # flows take turns, each in order.
    assert taken == ["b-int0", "a-int0", "a-bg0", "b-bg0", "c-batch0", "a-bg1", "b-bg1", "a-bg2", "a-bg3"]
    assert order.pop_from() is None
    with pytest.raises(IndexError):
        order.pop()


def test_a_flood_of_interactive_jobs_leaves_another_tenants_background_work_its_share() -> None:
    """Issue 37: with class order first, tenant X's interactive flood took every turn and Y's background work
    none. At equal weights Y's flow gets every other turn; at 3 to 1, one in four."""
    for weights, expected in ((ClassWeights(interactive=2, background=2), 10), (ClassWeights(3, 1), 5)):
        order: FairOrder[str] = FairOrder(weights)
        for number in range(20):
            order.push("background", "y", f"y{number}")
        for number in range(100):
            order.push("interactive", "x", f"x{number}")
        taken = Counter(order.pop()[0] for _ in range(20))
        assert taken["y"] == expected


def test_a_flow_that_drains_between_its_jobs_keeps_its_place_in_the_turns() -> None:
    """Six loops of short creates: X's flow empties each time its create is taken and fills again right after;
    it must not come back at the front each time (its last tag is remembered)."""
    order: FairOrder[str] = FairOrder()
    for number in range(20):
        order.push("background", "y", f"y{number}")
    taken: list[str] = []
    x_waits = False
    for number in range(20):
        if not x_waits:  # X sends its next create once the last one is taken
            order.push("interactive", "x", f"x{number}")
            x_waits = True
        taken.append(order.pop())
        x_waits = not taken[-1].startswith("x")
    assert sum(name.startswith("y") for name in taken) == 10


def test_a_tenant_arriving_behind_a_long_backlog_waits_for_at_most_one_of_its_jobs() -> None:
    order: FairOrder[str] = FairOrder()
    for number in range(500):
        order.push("background", "a", f"a{number}")
    assert order.pop() == "a0"  # a was alone: its job goes
    order.push("background", "b", "b0")
    order.push("background", "b", "b1")
    assert [order.pop() for _ in range(4)] == ["b0", "a1", "b1", "a2"]


def test_a_resumed_item_goes_first_of_its_flow_and_classes_can_be_held_back() -> None:
    order: FairOrder[str] = FairOrder()
    order.push("background", "a", "a-bg0")
    order.push("background", "a", "a-bg1")
    order.push("interactive", "b", "b-int0")
    order.push("background", "a", "a-resumed", first=True)
    # Only interactive jobs may take the place (the one kept for them):
    assert order.pop_from(("interactive",)) == "b-int0"
    assert order.pop_from(("interactive",)) is None
    assert [order.pop(), order.pop(), order.pop()] == ["a-resumed", "a-bg0", "a-bg1"]


def test_removing_a_waiting_item_keeps_the_others_order() -> None:
    order: FairOrder[str] = FairOrder()
    for item in ("a0", "a1"):
        order.push("interactive", "a", item)
    order.push("interactive", "b", "b0")
    order.remove("interactive", "b", "b0")
    order.remove("interactive", "b", "b0")  # gone already: nothing
    order.remove("interactive", "a", "a0")
    assert len(order) == 1
    assert order.waiting_by_tenant() == {("a", "interactive"): 1}
    assert order.pop() == "a1"


def test_the_tags_of_flows_long_gone_are_forgotten() -> None:
    order: FairOrder[str] = FairOrder()
    for number in range(1000):
        order.push("background", f"tenant{number}", "job")
        order.pop()
    order.push("background", "last", "job")
    for number in range(200):
        order.push("background", "last", f"job{number}")
        order.pop()
    assert len(order._last) < 100


def test_a_job_keeps_its_class_through_the_queue_and_an_older_payload_gets_one() -> None:
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=4)
    job = GenerationJob("resp_1", [1], sampling, {"background": True}, True, False, tenant="a", job_class="batch")
    assert GenerationJob.from_payload(job.to_payload()).job_class == "batch"
    for background, expected in ((True, "background"), (False, "interactive")):
        payload = job.to_payload()
        del payload["job_class"]  # queued before jobs carried their class
        payload["response"] = {"background": background}
        assert GenerationJob.from_payload(payload).job_class == expected
