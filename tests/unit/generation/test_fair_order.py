"""The fair order waiting jobs are served in: class first (interactive, background, batch), tenants in turn within
a class, each tenant's items first in, first out."""

from __future__ import annotations

import pytest

from app.generation.job import FairOrder, GenerationJob
from app.generation.types import SamplingParams


def test_fair_order_serves_class_first_then_tenants_in_turn_each_in_order() -> None:
    order: FairOrder[str] = FairOrder()
    for number in range(4):
        order.push("background", "a", f"a-bg{number}")
    order.push("batch", "c", "c-batch0")
    order.push("background", "b", "b-bg0")
    order.push("background", "b", "b-bg1")
    order.push("interactive", "b", "b-int0")
    order.push("interactive", "a", "a-int0")
    assert len(order) == 9
    assert order.next_class() == "interactive"
    taken = [order.pop() for _ in range(len(order))]
    assert taken == [
        "b-int0",
        "a-int0",
        "a-bg0",
        "b-bg0",
        "a-bg1",
        "b-bg1",
        "a-bg2",
        "a-bg3",
        "c-batch0",
    ]
    assert order.next_class() is None
    with pytest.raises(IndexError):
        order.pop()


def test_a_tenant_arriving_behind_a_long_backlog_waits_for_one_of_its_jobs() -> None:
    order: FairOrder[str] = FairOrder()
    for number in range(500):
        order.push("background", "a", f"a{number}")
    assert order.pop() == "a0"  # a was alone: its job goes
    order.push("background", "b", "b0")
    assert [order.pop(), order.pop()] == ["a1", "b0"]


def test_removing_a_waiting_item_keeps_the_others_order() -> None:
    order: FairOrder[str] = FairOrder()
    for item in ("a0", "a1"):
        order.push("interactive", "a", item)
    order.push("interactive", "b", "b0")
    order.remove("interactive", "b", "b0")
    order.remove("interactive", "b", "b0")  # gone already: nothing
    order.remove("interactive", "a", "a0")
    assert len(order) == 1
    assert order.pop() == "a1"


def test_a_job_keeps_its_class_through_the_queue_and_an_older_payload_gets_one() -> None:
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=4)
    job = GenerationJob("resp_1", [1], sampling, {"background": True}, True, False, tenant="a", job_class="batch")
    assert GenerationJob.from_payload(job.to_payload()).job_class == "batch"
    for background, expected in ((True, "background"), (False, "interactive")):
        payload = job.to_payload()
        del payload["job_class"]  # queued before jobs carried their class
        payload["response"] = {"background": background}
        assert GenerationJob.from_payload(payload).job_class == expected
