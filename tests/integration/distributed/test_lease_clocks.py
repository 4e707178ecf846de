"""Leases are judged by the database's clock, not by the host's (Postgres, distributed mode): a worker or a
reconciler whose clock runs 30 s fast takes over no live lease, and one whose clock runs 30 s slow writes a lease
that every other process sees live for its whole length. A host's skewed clock is simulated in-process by moving
every clock function of the app's modules: the point is that the local clock no longer decides. The same holds
for the other claims processes judge by time: a webhook delivery's, a vector store file's indexing, a `store:
false` turn's hold on its conversation, an Idempotency-Key's."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import literal_column, text, update

from app.config import Settings
from app.conversations import turns
from app.conversations.turns import ConversationTurn
from app.db import base
from app.db.migrations import upgrade_to_head
from app.db.models import (
    ConversationRow,
    ResponseRow,
    VectorStoreFileRow,
    VectorStoreRow,
    WebhookDeliveryRow,
    WebhookEndpointRow,
)
from app.db.session import Database
from app.errors import ApiError
from app.files.storage import FileWriter
from app.generation.job import GenerationJob
from app.idempotency import claims
from app.idempotency.header import KeyedRequest
from app.jobs import repository as jobs
from app.jobs.lease import JobLease
from app.jobs.recovery import Reconciler, RecoveryPolicy
from app.retrieval.indexing import Indexer
from app.runtime import Runtime
from app.secrets.sealer import ContentSealer
from app.testing.databases import fresh_postgres_database
from app.transport.base import GenerationQueue
from app.webhooks import repository as webhooks
from app.webhooks.delivery import DeliveryPolicy, WebhookDeliverer
from app.webhooks.outbox import record_event

SKEW = timedelta(seconds=30)
REAL_UTC_NOW = base.utc_now


@pytest.fixture
def database_url() -> Iterator[str]:
    """A database of each test's own: a reconciler round reads every row, none may be another test's."""
    with fresh_postgres_database() as url:
        upgrade_to_head(url)
        yield url


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    connected = Database.connect(database_url)
    try:
        yield connected
    finally:
        await connected.dispose()


@contextmanager
def clock_off_by(skew: timedelta) -> Iterator[None]:
    """This process's clock runs `skew` fast (negative: slow): every app module's clock function says so."""

    def skewed() -> datetime:
        return REAL_UTC_NOW() + skew

    with pytest.MonkeyPatch.context() as patch:
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] == "app" and getattr(module, "utc_now", None) is REAL_UTC_NOW:
                patch.setattr(module, "utc_now", skewed)
        yield


async def _queued(database: Database, response_id: str, *, background: bool = True) -> str:
    async with database.transaction() as session:
        session.add(
            ResponseRow(
                id=response_id,
                tenant="t",
                status="queued",
                model="fake-model",
                background=background,
                stream=False,
                params={},
                job={"response_id": response_id},
            )
        )
    return response_id


async def _claim(database: Database, response_id: str, owner: str, lease_s: float) -> JobLease | None:
    lease = JobLease(response_id, owner=owner, lease_s=lease_s, keep_job=False)
    async with database.transaction() as session:
        return lease if await lease.claim(session, keeps_events=False) is not None else None


async def _row(database: Database, response_id: str) -> ResponseRow:
    async with database.read() as session:
        row = await jobs.reload(session, response_id)
    assert row is not None
    return row


async def _lease_left_s(database: Database, response_id: str) -> float:
    """How long the response's lease has left, by the database's clock."""
    query = text("SELECT lease_expires_at - statement_timestamp() FROM responses WHERE id = :id")
    async with database.read() as session:
        left = (await session.execute(query, {"id": response_id})).scalar_one()
    assert isinstance(left, timedelta)
    return left.total_seconds()


async def test_a_worker_whose_clock_runs_fast_does_not_take_over_a_live_lease(database: Database) -> None:
    response_id = await _queued(database, "resp_fast_taker")
    assert await _claim(database, response_id, "worker_a", lease_s=15) is not None
    with clock_off_by(SKEW):
        # By this host's clock worker_a's lease ran out 15 s ago; by the database's it has 15 s left.
        assert await _claim(database, response_id, "worker_fast", lease_s=15) is None
    row = await _row(database, response_id)
    assert (row.status, row.lease_owner, row.attempts) == ("in_progress", "worker_a", 1)


async def test_a_worker_whose_clock_runs_slow_writes_a_lease_live_for_its_whole_length(database: Database) -> None:
    response_id = await _queued(database, "resp_slow_writer")
    with clock_off_by(-SKEW):
        slow = await _claim(database, response_id, "worker_slow", lease_s=15)
        assert slow is not None
        assert 14 < await _lease_left_s(database, response_id) <= 15
        async with database.transaction() as session:
            assert await slow.renew(session) is False  # still ours, no cancel asked
        assert 14 < await _lease_left_s(database, response_id) <= 15
    # Another worker, its clock right, sees the lease live and leaves the job alone.
    assert await _claim(database, response_id, "worker_b", lease_s=15) is None
    assert (await _row(database, response_id)).lease_owner == "worker_slow"


async def test_a_lease_written_by_a_fast_clock_runs_out_on_time(database: Database) -> None:
    """The other way round: a fast clock's lease is not longer than it says, so its job is taken over once it
    lapses (a clock 30 s fast would otherwise write a 1 s lease that holds for 31)."""
    response_id = await _queued(database, "resp_fast_writer")
    with clock_off_by(SKEW):
        assert await _claim(database, response_id, "worker_fast", lease_s=1) is not None
    assert await _lease_left_s(database, response_id) <= 1
    await asyncio.sleep(1.2)  # the fast worker froze past its lease
    assert await _claim(database, response_id, "worker_b", lease_s=15) is not None
    assert (await _row(database, response_id)).lease_owner == "worker_b"


class RecordingQueue:
    """The reconciler's queue: records what it is handed; no worker, no bus."""

    bus = None

    def __init__(self) -> None:
        self.requeued: list[str] = []

    async def requeue(self, job: GenerationJob, previous_owner: str | None) -> None:
        self.requeued.append(job.response_id)

    async def job_is_waiting(self, response_id: str) -> bool:
        return True

    async def release_stranded(self) -> int:
        return 0

    async def live_workers(self, model: str | None = None) -> int:
        return 1


def _reconciler(database: Database, queue: RecordingQueue) -> Reconciler:
    return Reconciler(database, cast(GenerationQueue, queue), RecoveryPolicy(lease_s=15, max_attempts=3))


async def test_a_reconciler_whose_clock_runs_fast_takes_over_and_ends_nothing_live(database: Database) -> None:
    background = await _queued(database, "resp_live_background")
    foreground = await _queued(database, "resp_live_foreground", background=False)
    for response_id in (background, foreground):
        assert await _claim(database, response_id, "worker_a", lease_s=15) is not None
    queue = RecordingQueue()
    with clock_off_by(SKEW):
        report = await _reconciler(database, queue).run_round()
    assert (report.taken_over, report.ended, queue.requeued) == (0, 0, [])
    for response_id in (background, foreground):
        row = await _row(database, response_id)
        assert (row.status, row.lease_owner) == ("in_progress", "worker_a")


async def test_a_reconciler_whose_clock_runs_slow_still_settles_a_lease_that_ran_out(database: Database) -> None:
    response_id = await _queued(database, "resp_lapsed", background=False)
    assert await _claim(database, response_id, "worker_gone", lease_s=15) is not None
    lapsed: dict[str, Any] = {"lease_expires_at": literal_column("statement_timestamp() - interval '1 second'")}
    async with database.transaction() as session:
        await session.execute(update(ResponseRow).where(ResponseRow.id == response_id).values(**lapsed))
    with clock_off_by(-SKEW):
        # By this host's clock the lease has 29 s left; by the database's it ran out a second ago.
        report = await _reconciler(database, RecordingQueue()).run_round()
    assert report.ended == 1
    assert (await _row(database, response_id)).status == "failed"


async def test_a_webhook_deliverer_whose_clock_runs_fast_takes_no_delivery_another_is_sending(
    database: Database,
) -> None:
    now = REAL_UTC_NOW()
    async with database.transaction() as session:
        hook = WebhookEndpointRow(
            id="we_clock",
            tenant="t",
            name="n",
            url="https://example.com/hook",
            event_types=["batch.completed"],
            status="enabled",
            sealed_secret="sealed",
            signing_secret_hint="whsec_...abcd",
            created_at=now,
            updated_at=now,
        )
        await webhooks.insert_endpoint(session, hook)
        [delivery_id] = await record_event(session, tenant="t", event_type="batch.completed", object_id="batch_1")
    # Another process claimed it a moment ago and is sending it: its claim holds for 15 s by the database's clock.
    claimed: dict[str, Any] = {
        "claim_token": "claim_other",
        "attempts": 1,
        "next_attempt_at": literal_column("statement_timestamp() + interval '15 seconds'"),
    }
    async with database.transaction() as session:
        await session.execute(update(WebhookDeliveryRow).where(WebhookDeliveryRow.id == delivery_id).values(**claimed))
    settings = Settings(database_url="sqlite://", _env_file=None)
    fast = WebhookDeliverer(database, ContentSealer([b"k" * 32]), settings, DeliveryPolicy(retry_window_s=60))
    with clock_off_by(SKEW):
        assert await fast.run_round() == 0
    async with database.read() as session:
        row = await session.get(WebhookDeliveryRow, delivery_id)
    assert row is not None and (row.claim_token, row.attempts, row.status) == ("claim_other", 1, "pending")


async def test_an_indexer_whose_clock_runs_fast_takes_no_file_another_is_indexing(database: Database) -> None:
    async with database.transaction() as session:
        writer = FileWriter(session, tenant="t", purpose="assistants", filename="notes.txt")
        await writer.write(b"Leases are judged by the database's clock. " * 20)
        stored = await writer.close()
        session.add(VectorStoreRow(id="vs_clock", tenant="t", name="s", embedding_model=None))
        await session.flush()
        session.add(VectorStoreFileRow(vector_store_id="vs_clock", id=stored.id, tenant="t", filename="notes.txt"))
    # Another process claimed it a moment ago and is indexing it: its claim holds for 15 s by the database's clock.
    claimed: dict[str, Any] = {
        "claimed_by": "indexer_other",
        "attempts": 1,
        "lease_expires_at": literal_column("statement_timestamp() + interval '15 seconds'"),
    }
    async with database.transaction() as session:
        await session.execute(update(VectorStoreFileRow).values(**claimed))
    settings = Settings(_env_file=None, vector_index_lease_s=15, vector_index_max_attempts=3)
    with clock_off_by(SKEW):
        assert await Indexer(database, settings, None).run_round() is False
    async with database.read() as session:
        row = await session.get(VectorStoreFileRow, ("vs_clock", stored.id))
    assert row is not None and (row.claimed_by, row.attempts, row.status) == ("indexer_other", 1, "in_progress")


async def test_an_api_node_whose_clock_runs_fast_takes_no_conversation_a_live_unstored_turn_holds(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `store: false` turn has no row to end its hold on the conversation: the hold is a lease (shortened here
    from 10 minutes to 15 s, so that 30 s of skew would matter)."""
    monkeypatch.setattr(turns, "UNSTORED_CLAIM_LEASE_S", 15)
    async with database.transaction() as session:
        session.add(ConversationRow(id="conv_clock", tenant="t", created_at=REAL_UTC_NOW()))
    async with database.transaction() as session:
        await turns.claim(session, ConversationTurn("conv_clock", 0), "resp_unstored", "t")
    with clock_off_by(SKEW), pytest.raises(ApiError) as refused:
        async with database.transaction() as session:
            await turns.claim(session, ConversationTurn("conv_clock", 0), "resp_fast", "t")
    assert refused.value.code == "conversation_locked"
    async with database.read() as session:
        row = await session.get(ConversationRow, "conv_clock")
    assert row is not None and row.active_response_id == "resp_unstored"


@dataclass
class KeysRuntime:
    """What an Idempotency-Key's claim reads of the runtime."""

    database: Database
    settings: Settings


@pytest.mark.parametrize("skewed", ["the node that holds the key runs slow", "the node that retries runs fast"])
async def test_an_idempotency_key_whose_request_still_runs_is_not_taken_over_for_a_skewed_clock(
    database: Database, skewed: str
) -> None:
    """A key held by a running request is taken over only once the request has held it past
    RESPONSES_IDEMPOTENCY_ABANDONED_S (15 s here, so that 30 s of skew would matter): a retry meanwhile waits, then
    is a 409, rather than running the create a second time."""
    settings = Settings(_env_file=None, idempotency_abandoned_s=15, idempotency_wait_s=0.2)
    runtime = cast(Runtime, KeysRuntime(database, settings))
    keyed = KeyedRequest("key-clock", "hash-of-the-request")
    holder, retrier = (clock_off_by(-SKEW), nullcontext()) if "slow" in skewed else (nullcontext(), clock_off_by(SKEW))
    with holder:
        assert isinstance(await claims.claim_key(runtime, "t", keyed), claims.Claim)
    with retrier, pytest.raises(ApiError) as refused:
        await claims.claim_key(runtime, "t", keyed)
    assert refused.value.code == "idempotency_key_in_use"
