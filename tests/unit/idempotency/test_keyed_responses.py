"""Idempotency-Key on POST /v1/responses, in-process with the fake model: the same key with the same body answers
the same response (foreground, background, stream), whatever state it is in; another body is a 409; another
tenant's key never matches; two at once run once; a key past its window is a new create; errors are not kept."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from app.db.base import utc_now
from app.db.models import IdempotencyKeyRow, ResponseRow
from app.runtime import Runtime
from app.testing.fakes import FAKE_REPLY, FakeRunner
from tests.protocol import assert_error

BODY = {"model": "fake-model", "input": "hello"}


def key_header(key: str | None = None) -> dict[str, str]:
    return {"Idempotency-Key": key or str(uuid.uuid4())}


async def stored_responses(runtime: Runtime) -> int:
    async with runtime.database.read() as session:
        return int((await session.execute(select(func.count()).select_from(ResponseRow))).scalar_one())


async def until(condition: Any, timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.005)


async def test_the_same_key_and_body_answer_the_same_response_once(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    headers = key_header()
    first = await client.post("/v1/responses", json=BODY, headers=headers)
    again = await client.post("/v1/responses", json=BODY, headers=headers)
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json() and first.json()["status"] == "completed"
    assert again.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert len(runner.jobs) == 1 and await stored_responses(app_runtime) == 1
    # Without a key, the same body is a new response each time (as ever).
    plain = [(await client.post("/v1/responses", json=BODY)).json()["id"] for _ in range(2)]
    assert len(set(plain) | {first.json()["id"]}) == 3


async def test_another_body_or_path_with_the_key_is_a_409_naming_it(client: httpx.AsyncClient) -> None:
    headers = key_header()
    assert (await client.post("/v1/responses", json=BODY, headers=headers)).status_code == 200
    other = await client.post("/v1/responses", json={**BODY, "input": "something else"}, headers=headers)
    error = assert_error(other, 409, param="Idempotency-Key", code="idempotency_key_reused")
    assert "another request" in error["message"]
    assert other.headers["x-should-retry"] == "false"  # the SDKs retry a 409 otherwise
    elsewhere = await client.post("/v1/conversations", json={}, headers=headers)
    assert_error(elsewhere, 409, param="Idempotency-Key", code="idempotency_key_reused")


async def test_another_tenants_key_never_matches(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient], runner: FakeRunner
) -> None:
    alpha, beta = two_tenants
    headers = key_header("shared-key")
    body = {**BODY, "model": "m"}
    made_a = (await alpha.post("/v1/responses", json=body, headers=headers)).json()
    made_b = (await beta.post("/v1/responses", json=body, headers=headers)).json()
    assert made_a["id"] != made_b["id"] and len(runner.jobs) == 2
    # Each tenant's key answers its own response; another body is a 409 for the tenant that used it only.
    assert (await alpha.post("/v1/responses", json=body, headers=headers)).json()["id"] == made_a["id"]
    assert (await beta.get(f"/v1/responses/{made_a['id']}")).status_code == 404


async def test_two_at_once_run_once(client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner) -> None:
    runner.delay_s = 0.01
    headers = key_header()
    replies = await asyncio.gather(*(client.post("/v1/responses", json=BODY, headers=headers) for _ in range(4)))
    assert {reply.status_code for reply in replies} == {200}
    assert len({reply.json()["id"] for reply in replies}) == 1
    assert all(reply.json()["status"] == "completed" for reply in replies)
    assert len(runner.jobs) == 1 and await stored_responses(app_runtime) == 1


async def test_a_retry_while_the_first_runs_waits_for_the_same_response(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    runner.delay_s = 0.02
    headers = key_header()
    first = asyncio.create_task(client.post("/v1/responses", json=BODY, headers=headers))
    await until(lambda: runner.runs and next(iter(runner.runs.values())).produced >= 2)
    retry = await client.post("/v1/responses", json=BODY, headers=headers)
    assert retry.status_code == 200 and retry.json()["status"] == "completed"
    assert retry.json() == (await first).json()
    assert retry.json()["output"][0]["content"][0]["text"] == " ".join(FAKE_REPLY)
    assert len(runner.jobs) == 1


async def _as_if_running(runtime: Runtime, key: str, *, claimed_ago_s: float = 0) -> None:
    """The key's row as a first request that has not finished holds it (its process perhaps dead)."""
    async with runtime.database.transaction() as session:
        claimed_at = utc_now() - timedelta(seconds=claimed_ago_s)
        query = update(IdempotencyKeyRow).where(IdempotencyKeyRow.key == key)
        await session.execute(query.values(state="running", resource_id=None, claimed_at=claimed_at))


@pytest.mark.settings(idempotency_wait_s=0)
async def test_a_retry_that_cannot_wait_for_the_first_gets_a_409_in_use(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    headers = key_header()
    assert (await client.post("/v1/responses", json=BODY, headers=headers)).status_code == 200
    await _as_if_running(app_runtime, headers["Idempotency-Key"])
    busy = await client.post("/v1/responses", json=BODY, headers=headers)
    assert_error(busy, 409, param="Idempotency-Key", code="idempotency_key_in_use")
    assert busy.headers["Retry-After"] == "1"
    # Another body is still refused as another request, running or not.
    other = await client.post("/v1/responses", json={**BODY, "input": "other"}, headers=headers)
    assert_error(other, 409, param="Idempotency-Key", code="idempotency_key_reused")
    assert len(runner.jobs) == 1


@pytest.mark.settings(idempotency_abandoned_s=60)
async def test_a_claim_whose_request_never_finished_is_taken_over(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    headers = key_header()
    first = (await client.post("/v1/responses", json=BODY, headers=headers)).json()
    await _as_if_running(app_runtime, headers["Idempotency-Key"], claimed_ago_s=61)
    taken = await client.post("/v1/responses", json=BODY, headers=headers)
    assert taken.status_code == 200 and taken.json()["id"] != first["id"]
    assert "Idempotent-Replayed" not in taken.headers
    again = await client.post("/v1/responses", json=BODY, headers=headers)
    assert again.json()["id"] == taken.json()["id"] and len(runner.jobs) == 2


async def test_a_background_create_retried_answers_its_response_as_it_is_now(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    headers = key_header()
    body = {**BODY, "background": True}
    created = (await client.post("/v1/responses", json=body, headers=headers)).json()
    assert created["status"] == "queued"
    await until(lambda: created["id"] in runner.runs and runner.runs[created["id"]].produced == len(FAKE_REPLY))
    for _ in range(200):
        again = (await client.post("/v1/responses", json=body, headers=headers)).json()
        if again["status"] == "completed":
            break
        await asyncio.sleep(0.01)
    assert again == (await client.get(f"/v1/responses/{created['id']}")).json()
    assert again["id"] == created["id"] and again["status"] == "completed" and len(runner.jobs) == 1


async def test_a_key_past_its_window_is_a_new_create_and_retention_forgets_it(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    from app.ops.retention import apply_retention

    old, kept = key_header(), key_header()
    first = (await client.post("/v1/responses", json=BODY, headers=old)).json()
    await client.post("/v1/responses", json=BODY, headers=kept)
    async with app_runtime.database.transaction() as session:
        query = update(IdempotencyKeyRow).where(IdempotencyKeyRow.key == old["Idempotency-Key"])
        await session.execute(query.values(expires_at=utc_now() - timedelta(seconds=1)))
    # Past its window, the key is a new create (even before retention runs); another body too.
    renewed = (await client.post("/v1/responses", json=BODY, headers=old)).json()
    assert renewed["id"] != first["id"] and len(runner.jobs) == 3
    async with app_runtime.database.transaction() as session:
        query = update(IdempotencyKeyRow).where(IdempotencyKeyRow.key == old["Idempotency-Key"])
        await session.execute(query.values(expires_at=utc_now() - timedelta(seconds=1)))
    report = await apply_retention(app_runtime.database, app_runtime.settings)
    assert report.purged_idempotency_keys == 1
    async with app_runtime.database.read() as session:
        keys = (await session.execute(select(IdempotencyKeyRow.key))).scalars().all()
    assert keys == [kept["Idempotency-Key"]]
    # The responses themselves stay: only the keys' memory is forgotten.
    assert (await client.get(f"/v1/responses/{first['id']}")).status_code == 200


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (b"", "1 to 255 characters"),
        (b"k" * 256, "1 to 255 characters"),
        ("clé".encode(), "printable ASCII"),
        (b"tab\there", "printable ASCII"),
    ],
)
async def test_a_bad_key_is_a_400_naming_the_header(client: httpx.AsyncClient, value: bytes, says: str) -> None:
    reply = await client.post("/v1/responses", json=BODY, headers=[(b"Idempotency-Key", value)])
    error = assert_error(reply, 400, param="Idempotency-Key", code="invalid_idempotency_key")
    assert says in error["message"]


async def test_a_key_sent_twice_or_with_store_false_is_a_400(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    twice = await client.post("/v1/responses", json=BODY, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
    assert_error(twice, 400, param="Idempotency-Key", code="invalid_idempotency_key")
    unstored = await client.post("/v1/responses", json={**BODY, "store": False}, headers=key_header())
    assert_error(unstored, 400, param="Idempotency-Key", code="idempotency_key_unstored")
    assert await stored_responses(app_runtime) == 0
    # A key of the longest length is fine.
    assert (await client.post("/v1/responses", json=BODY, headers=key_header("k" * 255))).status_code == 200


async def test_an_error_is_not_remembered_so_a_retry_can_succeed(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    headers = key_header()
    missing = {**BODY, "previous_response_id": "resp_missing"}
    for _ in range(2):  # run again each time (not replayed): a fixed state would let it pass
        reply = await client.post("/v1/responses", json=missing, headers=headers)
        assert_error(reply, 400, param="previous_response_id")
        assert "Idempotent-Replayed" not in reply.headers
    async with app_runtime.database.read() as session:
        assert (await session.execute(select(func.count()).select_from(IdempotencyKeyRow))).scalar_one() == 0
    # The key is free: the request fixed, it runs.
    assert (await client.post("/v1/responses", json=BODY, headers=headers)).status_code == 200


async def test_a_retry_after_the_response_was_deleted_is_a_404(client: httpx.AsyncClient) -> None:
    headers = key_header()
    made = (await client.post("/v1/responses", json=BODY, headers=headers)).json()
    assert (await client.delete(f"/v1/responses/{made['id']}")).status_code == 200
    gone = await client.post("/v1/responses", json=BODY, headers=headers)
    assert_error(gone, 404, param="response_id")
