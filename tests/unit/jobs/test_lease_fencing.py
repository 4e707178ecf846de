"""The lease's fencing token: a run frozen past its lease (SIGSTOP, a VM stall, a network partition) writes
nothing once its job has been claimed again, even by a new run in the same process; and a job released for a
takeover reads `queued` until a run claims it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from app.db.base import utc_now
from app.db.models import ResponseRow
from app.jobs import repository as jobs
from app.jobs.lease import JobLease, LeaseLost
from app.jobs.repository import ProgressStep
from app.lifecycle import transitions
from app.runtime import Runtime

OWNER = "worker_same_process"


async def _queued_response(runtime: Runtime) -> str:
    response_id = "resp_fencing"
    async with runtime.database.transaction() as session:
        session.add(
            ResponseRow(
                id=response_id,
                tenant="t",
                status="queued",
                model="fake-model",
                background=True,
                stream=True,
                params={},
                job={"response_id": response_id},
            )
        )
    return response_id


async def _expire_and_release(runtime: Runtime, response_id: str) -> None:
    """As the reconciler does once the lease ran out (its run looked dead)."""
    async with runtime.database.transaction() as session:
        past = utc_now() - timedelta(seconds=1)
        await session.execute(update(ResponseRow).where(ResponseRow.id == response_id).values(lease_expires_at=past))
        assert await transitions.release_for_takeover(session, response_id)


async def _status(runtime: Runtime, response_id: str) -> str:
    async with runtime.database.read() as session:
        row = await jobs.reload(session, response_id)
    assert row is not None
    return row.status


async def test_a_run_frozen_past_its_lease_writes_nothing_once_its_process_claimed_the_job_again(
    app_runtime: Runtime,
) -> None:
    response_id = await _queued_response(app_runtime)
    frozen = JobLease(response_id, owner=OWNER, lease_s=5, keep_job=True)
    async with app_runtime.database.transaction() as session:
        assert await frozen.claim(session, keeps_events=True) is not None
    await _expire_and_release(app_runtime, response_id)
    # Released for a takeover: nobody generates it, and it says so.
    assert await _status(app_runtime, response_id) == "queued"

    again = JobLease(response_id, owner=OWNER, lease_s=5, keep_job=True)
    async with app_runtime.database.transaction() as session:
        assert await again.claim(session, keeps_events=True) is not None
    assert await _status(app_runtime, response_id) == "in_progress"
    assert (frozen.holder.owner, again.holder.owner) == (OWNER, OWNER)
    assert (frozen.holder.attempt, again.holder.attempt) == (1, 2)

    # The frozen run wakes: its renewal, its hand-over and its final write are all refused.
    for write in (
        lambda session: frozen.renew(session),
        lambda session: frozen.finish(session, {"status": "completed"}, turn=None),
    ):
        with pytest.raises(LeaseLost):
            async with app_runtime.database.transaction() as session:
                await write(session)
    async with app_runtime.database.transaction() as session:
        assert not await frozen.hand_over(session, None)
        assert not await frozen.hand_back(session, None)
    # The run that holds the job now goes on, and finishes it once.
    async with app_runtime.database.transaction() as session:
        assert await again.renew(session) is False
        await again.finish(session, {"status": "completed"}, turn=None)
    assert await _status(app_runtime, response_id) == "completed"


async def test_a_preempted_run_gives_its_job_back_queued_with_its_progress_for_the_next_claim(
    app_runtime: Runtime,
) -> None:
    response_id = await _queued_response(app_runtime)
    preempted = JobLease(response_id, owner=OWNER, lease_s=5, keep_job=True)
    async with app_runtime.database.transaction() as session:
        assert await preempted.claim(session, keeps_events=True) is not None
        assert await preempted.hand_back(session, ProgressStep(0, ["Hello", " there"], []))
    async with app_runtime.database.read() as session:
        row = await jobs.reload(session, response_id)
    assert row is not None and (row.status, row.lease_owner, row.lease_expires_at) == ("queued", None, None)
    # Not an expired lease: the reconciler leaves it to the queue that holds it.
    async with app_runtime.database.read() as session:
        assert await jobs.expired_leases(session, limit=10) == []
    # Given back once: its writes are refused from now on.
    async with app_runtime.database.transaction() as session:
        assert not await preempted.hand_back(session, None)
    with pytest.raises(LeaseLost):
        async with app_runtime.database.transaction() as session:
            await preempted.renew(session)
    resumed = JobLease(response_id, owner=OWNER, lease_s=5, keep_job=True)
    async with app_runtime.database.transaction() as session:
        claim = await resumed.claim(session, keeps_events=True)
    assert claim is not None and claim.progress is not None
    assert (claim.progress.pieces, resumed.holder.attempt) == (["Hello", " there"], 2)
