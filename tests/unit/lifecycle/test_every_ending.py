"""Every way a response ends has the same effects beside its end: its output items found by item_reference, its
conversation turn finished, its usage counted, its webhook event in the outbox, its prompt-cache diagnostics, and
its terminal event stored and published (embedded mode, the fake engine)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from app.db.base import utc_now
from app.db.models import ConversationRow, ResponseRow, UsageDayRow, WebhookDeliveryRow
from app.events.terminal import TERMINAL_EVENT_TYPES
from app.items import repository as items
from app.jobs import repository as jobs
from app.jobs.recovery import Reconciler, RecoveryPolicy
from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from app.transport.inprocess import InProcessQueue

# Reconciliation rounds are run by hand (the server's own loop would race them); one attempt a job.
pytestmark = pytest.mark.settings(
    lease_s=1, max_attempts=1, reconcile_interval_s=3600, webhook_delivery_interval_s=3600
)
WORDS = [f"w{index}" for index in range(400)]


@dataclass
class Case:
    client: httpx.AsyncClient
    runtime: Runtime
    runner: FakeRunner
    conversation_id: str
    comparison_id: str

    async def start(self) -> tuple[str, asyncio.Task[httpx.Response]]:
        """A background stream on the conversation, compared with an earlier response's prompt cache, that has
        said a few words and goes on."""
        body = {
            "input": "long work",
            "background": True,
            "stream": True,
            "conversation": self.conversation_id,
            "prompt_cache_options": {"comparison_response_id": self.comparison_id},
        }
        count = len(self.runner.jobs)
        live = asyncio.create_task(self.client.post("/v1/responses", json=body))
        await until(lambda: len(self.runner.jobs) > count)
        response_id = self.runner.jobs[-1].response_id
        await until(lambda: self.runner.runs[response_id].produced >= 3)
        return response_id, live

    def reconciler(self) -> Reconciler:
        return Reconciler(
            self.runtime.database, self.runtime.queue, RecoveryPolicy.from_settings(self.runtime.settings)
        )

    async def lose_lease(self, response_id: str) -> None:
        """Its run is gone (it crashed): its lease is made to have expired, as it would after lease_s."""
        async with self.runtime.database.transaction() as session:
            past = {"lease_expires_at": utc_now() - timedelta(seconds=5)}
            await session.execute(update(ResponseRow).where(ResponseRow.id == response_id).values(**past))

    def queue(self) -> InProcessQueue:
        assert isinstance(self.runtime.queue, InProcessQueue)
        return self.runtime.queue

    async def hand_back(self, response_id: str) -> None:
        """Preempted: its run gives its job back between two tokens, and the response reads `queued` again."""
        assert self.queue().executor.preempt(response_id)
        await until_status(self.runtime, response_id, "queued")


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def row_of(runtime: Runtime, response_id: str) -> ResponseRow:
    async with runtime.database.read() as session:
        row = await session.get(ResponseRow, response_id, populate_existing=True)
    assert row is not None
    return row


async def until_status(runtime: Runtime, response_id: str, *statuses: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while (await row_of(runtime, response_id)).status not in statuses:
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def held_run(case: Case) -> str:
    case.runner.reply = WORDS[:8]
    response_id, _ = await case.start()
    return response_id


async def reconciler_ends_a_cancelled_lost_run(case: Case) -> str:
    case.runner.crash_after = 4
    response_id, _ = await case.start()
    await until(lambda: case.runner.runs[response_id].produced >= 4)
    await asyncio.sleep(0.1)  # the crash is past
    async with case.runtime.database.transaction() as session:
        assert await jobs.request_cancel(session, response_id, now=utc_now())
    await case.lose_lease(response_id)
    assert (await case.reconciler().run_round()).ended == 1
    return response_id


async def cancel_while_queued(case: Case) -> str:
    response_id, _ = await case.start()
    await case.hand_back(response_id)
    assert (await case.client.post(f"/v1/responses/{response_id}/cancel")).json()["status"] == "cancelled"
    return response_id


async def cancel_while_running(case: Case) -> str:
    response_id, _ = await case.start()
    assert (await case.client.post(f"/v1/responses/{response_id}/cancel")).json()["status"] == "cancelled"
    return response_id


async def unstored_failure(case: Case, monkeypatch: pytest.MonkeyPatch) -> str:
    """The final commit fails (not an outage): the run fails the response with its output so far."""
    insert_events = jobs.insert_events

    async def refuse_the_end(session: Any, response_id: str, events: Any) -> None:
        if any(event["type"] == "response.completed" for event in events):
            raise ValueError("a constraint the final write broke")
        await insert_events(session, response_id, events)

    monkeypatch.setattr(jobs, "insert_events", refuse_the_end)
    case.runner.reply = WORDS[:8]
    response_id, _ = await case.start()
    return response_id


async def steer(case: Case) -> str:
    response_id, _ = await case.start()
    async with case.runtime.database.transaction() as session:
        assert await jobs.request_steer(session, response_id, now=utc_now())
    await case.runtime.queue.steer(response_id)
    return response_id


async def preemption_hand_back(case: Case) -> str:
    case.runner.reply = WORDS[:12]
    response_id, _ = await case.start()
    await case.hand_back(response_id)
    job = case.runner.jobs[-1]
    await case.runtime.queue.requeue(job, None)  # the queue gives it to a later run, which ends it
    return response_id


async def worker_lost_past_its_attempts(case: Case) -> str:
    case.runner.crash_after = 4
    response_id, _ = await case.start()
    await until(lambda: case.runner.runs[response_id].produced >= 4)
    await asyncio.sleep(0.1)
    await case.lose_lease(response_id)
    assert (await case.reconciler().run_round()).ended == 1
    return response_id


PATHS: dict[str, tuple[Callable[..., Awaitable[str]], str]] = {
    "held run": (held_run, "completed"),
    "reconciler": (reconciler_ends_a_cancelled_lost_run, "cancelled"),
    "cancel while queued": (cancel_while_queued, "cancelled"),
    "cancel while running": (cancel_while_running, "cancelled"),
    "unstored failure": (unstored_failure, "failed"),
    "steer": (steer, "incomplete"),
    "preemption hand-back": (preemption_hand_back, "completed"),
    "worker lost past its attempts": (worker_lost_past_its_attempts, "failed"),
}


async def conversation_texts(client: httpx.AsyncClient, conversation_id: str) -> list[str]:
    page = (await client.get(f"/v1/conversations/{conversation_id}/items", params={"order": "asc"})).json()
    return [part["text"] for item in page["data"] for part in item.get("content", []) if "text" in part]


@pytest.mark.parametrize("path", list(PATHS))
async def test_every_ending_has_the_same_effects(
    path: str,
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hook = {
        "name": "all",
        "url": "https://example.com/hook",
        "event_types": ["response.completed", "response.failed", "response.cancelled", "response.incomplete"],
    }
    assert (await client.post("/v1/webhook_endpoints", json=hook)).status_code == 200
    compared = (await client.post("/v1/responses", json={"input": "long work"})).json()
    conversation = (await client.post("/v1/conversations", json={})).json()
    runner.delay_s, runner.reply = 0.01, list(WORDS)
    case = Case(client, app_runtime, runner, conversation["id"], compared["id"])
    end, status = PATHS[path]
    arguments = (case, monkeypatch) if end is unstored_failure else (case,)
    response_id = await end(*arguments)
    await until_status(app_runtime, response_id, status)
    runner.crash_after = None
    # The published end: the live stream's last event is the terminal one that was stored, and GET agrees.
    stream = (await client.get(f"/v1/responses/{response_id}", params={"stream": "true"})).text
    stored = parse_sse(stream)[-1]
    assert stored["type"] in TERMINAL_EVENT_TYPES and stored["response"]["status"] == status
    got = (await client.get(f"/v1/responses/{response_id}")).json()
    assert stored["response"] == got
    row = await row_of(app_runtime, response_id)
    # Its output items, as item_reference finds them.
    output_ids = [item["id"] for item in got["output"]]
    assert output_ids, "it had said something"
    async with app_runtime.database.read() as session:
        found = await items.find_items(session, output_ids, row.tenant)
        held = await session.scalar(
            select(ConversationRow.active_response_id).where(ConversationRow.id == conversation["id"])
        )
        requests = await session.scalar(select(func.sum(UsageDayRow.requests)).where(UsageDayRow.tenant == row.tenant))
        events = list(
            await session.scalars(
                select(WebhookDeliveryRow.event_type).where(WebhookDeliveryRow.object_id == response_id)
            )
        )
    assert set(found) == set(output_ids), "item_reference finds every output item"
    # Its conversation turn finished: the claim released, its items added if it completed (or was cut short).
    assert held is None
    added = await conversation_texts(client, conversation["id"])
    assert ("long work" in added) == (status in ("completed", "incomplete"))
    assert requests == 2, "the compared response and this one"
    assert events == [f"response.{status}"]
    assert row.prompt_cache_diagnostics is not None
    assert got["prompt_cache_diagnostics"] == row.prompt_cache_diagnostics
