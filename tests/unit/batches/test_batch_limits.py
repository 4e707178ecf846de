"""A batch under its project's rate limits (issue 37): its lines are paced by them (a line a limit refuses waits
for the limit's retry-after and runs then, never ending as a 429 error line), and each line counts against the
requests per minute as a create does."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select

from app.batches.advance import advance_batches
from app.db.models import BatchLineRow
from app.runtime import Runtime
from tests.unit.batches.batch_files import advance_until, create_batch, jsonl, request_line, result_lines

#: A line's prompt: about 200 of the fake tokenizer's tokens (one a word), so 32 lines pass 6,000 tokens a minute
#: (the bucket refills 100 a second: a refused line waits about two seconds).
LONG_INPUT = " ".join(f"w{index}" for index in range(190))


@pytest.mark.settings(rate_limit_tokens_per_min=6000, batch_max_running_lines=64, batch_lines_per_round=64)
async def test_lines_past_the_tokens_per_minute_wait_for_the_limit_and_all_complete(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    lines = [request_line(f"line-{index}", {"input": LONG_INPUT, "max_output_tokens": 16}) for index in range(32)]
    batch = await create_batch(client, jsonl(lines))

    # One round submits what the minute's tokens hold: the others wait (pending, with a time), none is an error.
    await advance_batches(app_runtime)  # validates, then submits
    async with app_runtime.database.read() as session:
        rows = (await session.execute(select(BatchLineRow))).scalars().all()
    waiting = [row for row in rows if row.state == "pending"]
    assert waiting and any(row.wait_until is not None for row in waiting)
    assert not [row for row in rows if row.state == "done" and row.status_code == 429]

    done = await advance_until(app_runtime, client, batch["id"], rounds=2000)
    assert done["status"] == "completed"
    assert done["request_counts"] == {"total": 32, "completed": 32, "failed": 0}
    assert done["error_file_id"] is None
    output = await result_lines(client, done["output_file_id"])
    assert {line["response"]["status_code"] for line in output.values()} == {200}


@pytest.mark.settings(rate_limit_requests_per_min=40, batch_max_running_lines=64, batch_lines_per_round=64)
async def test_each_line_counts_against_the_requests_per_minute(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    # The upload and the create are two requests; the 38 lines spend the rest of the minute (before, they spent
    # none of it).
    batch = await create_batch(client, jsonl([request_line(f"line-{index}") for index in range(38)]))
    done = await advance_until(app_runtime, client, batch["id"])
    assert done["request_counts"] == {"total": 38, "completed": 38, "failed": 0}

    # The minute is spent but for what refilled meanwhile (40 a minute: a few in the seconds the batch took).
    shown = await client.get(f"/v1/batches/{batch['id']}")
    assert int(shown.headers["x-ratelimit-remaining-requests"]) <= 20


@pytest.mark.settings(rate_limit_tokens_per_min=100)
async def test_a_line_no_minute_could_hold_ends_with_the_429_of_a_create(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    batch = await create_batch(client, jsonl([request_line("too-long", {"input": LONG_INPUT})]))
    done = await advance_until(app_runtime, client, batch["id"])
    assert done["request_counts"] == {"total": 1, "completed": 0, "failed": 1}
    errors = await result_lines(client, done["error_file_id"])
    assert errors["too-long"]["response"]["status_code"] == 429
    assert "Request too large" in errors["too-long"]["response"]["body"]["error"]["message"]
