"""One batch line's life: submitted as a background response through the same path a `background: true` create
takes (counted against its project's requests per minute, prepared, its prompt charged to its tokens per minute,
stored with the id fixed for the line, enqueued), paced by those limits (a line they refuse waits for their
retry-after, never failing), and, once its response ended, collected into the output (or error) line it becomes."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError

from app.batches import repository
from app.db.models import BatchLineRow, ResponseRow
from app.errors import ApiError, InvalidRequest, RateLimited
from app.events.snapshot import response_from_row
from app.responses import repository as responses
from app.responses import service, submission
from app.responses.parsing import parse_create_payload
from app.responses.schemas import CreateResponseRequest
from app.runtime import Runtime

logger = logging.getLogger(__name__)

#: The error a line's request may not carry: a batch line is answered in the output file, never streamed.
STREAM_REFUSED = "'stream' is not supported in a batch: each line's response is written to the output file."


def line_error(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def _line_request(body: dict[str, Any], runtime: Runtime) -> CreateResponseRequest:
    """The line's body as a create, run in the background and stored (its output must outlive its run; a line
    with `store: false` has its response deleted once collected)."""
    if body.get("stream"):
        raise InvalidRequest(STREAM_REFUSED, param="stream", code="unsupported_parameter")
    return parse_create_payload({**body, "background": True, "store": True}, runtime.settings)


def _wait_s(error: RateLimited) -> float | None:
    """How long a line refused by a rate limit waits before it is tried again (the limit's retry-after); None when
    no wait helps (a prompt larger than a whole minute's tokens: the line ends with the 429, as a create does)."""
    if error.headers.get("x-should-retry") == "false":
        return None
    try:
        return max(1, int(error.headers.get("retry-after-ms", "1000"))) / 1000
    except ValueError:
        return 1.0


async def submit_line(runtime: Runtime, line: BatchLineRow, tenant: str, now: datetime) -> bool:
    """Submit a line this node claimed (state `submitting`): counted against the project's requests per minute,
    stored under its fixed response id and enqueued, then `running`; a request the create would refuse (4xx)
    becomes an error line at once. A second submission of the same line (a claim taken over) finds its response
    stored and only marks it running: each line runs once.

    A line its project's rate limits refuse (requests or tokens per minute) goes back to `pending` until the
    limit's retry-after, and False says so: its tenant's other lines need not be tried this round."""
    try:
        request = _line_request(line.body, runtime)
        # Each line is a request as a create is: it counts against the requests per minute (issue 37: batches did
        # not), and its prompt against the tokens per minute where it is submitted (submission.py).
        await runtime.limits.admit_request(tenant)
        # A batch line's job is of the batch class: its share of the turns by its weight (generation/job.py).
        prepared = await service.prepare(request, tenant, runtime, response_id=line.response_id, job_class="batch")
        await submission.submit_response(runtime, prepared, tenant)
    except IntegrityError:
        # Stored by an earlier claim of this line whose node was slow or died before marking it running.
        logger.info("batch line %s/%d was already submitted", line.batch_id, line.line)
    except RateLimited as error:
        if (wait_s := _wait_s(error)) is None:
            await _end_refused(runtime, line, error)
            return True
        # Paced, never failed (issue 37: lines under a tokens_per_min limit became 429 error lines).
        async with runtime.database.transaction() as session:
            await repository.move_line(
                session,
                line.batch_id,
                line.line,
                ("submitting",),
                state="pending",
                claimed_at=None,
                wait_until=now + timedelta(seconds=wait_s),
            )
        return False
    except ApiError as error:
        if error.status_code >= 500:
            raise  # not the request's fault: the line is submitted again later
        # Refused as the create would refuse it (a 400, a conversation busy with another response): an error line.
        await _end_refused(runtime, line, error)
        return True
    async with runtime.database.transaction() as session:
        await repository.move_line(session, line.batch_id, line.line, ("submitting",), state="running")
    return True


async def _end_refused(runtime: Runtime, line: BatchLineRow, error: ApiError) -> None:
    async with runtime.database.transaction() as session:
        await repository.move_line(
            session,
            line.batch_id,
            line.line,
            ("submitting",),
            state="done",
            status_code=error.status_code,
            result=error.body(),
        )


def _response_body(line: BatchLineRow, row: ResponseRow) -> dict[str, Any]:
    body = response_from_row(row).model_dump(mode="json")
    # NOTE: every line runs as a stored background response (that is how it survives restarts); its body says
    # what the line asked for.
    body["background"] = bool(line.body.get("background"))
    body["store"] = line.keep_response
    return body


def _settled(line: BatchLineRow, row: ResponseRow | None) -> dict[str, Any]:
    """The values a line takes once its response ended (or was deleted)."""
    if row is None:
        error = line_error("response_not_found", "The line's response was deleted before it ended.")
        return {"status_code": None, "result": None, "error": error}
    if row.status in ("completed", "incomplete"):
        return {"status_code": 200, "result": _response_body(line, row), "error": None}
    if row.status == "failed":
        failure = row.error or {}
        body = {
            "error": {
                "message": failure.get("message", "The response failed."),
                "type": "server_error",
                "param": None,
                "code": failure.get("code", "server_error"),
            }
        }
        return {"status_code": 500, "result": body, "error": None}
    # cancelled: by the batch's cancel or expiry (the error it set when it stopped the line), or by the client.
    error = line.error or line_error("response_cancelled", "The line's response was cancelled.")
    return {"status_code": None, "result": None, "error": error}


async def collect_ended_lines(runtime: Runtime, limit: int) -> int:
    """Settle up to `limit` running lines whose response ended; how many. A line whose request said
    `store: false` has its response deleted in the same unit of work."""
    async with runtime.database.read() as session:
        ended = await repository.ended_lines(session, limit)
    for line, row in ended:
        async with runtime.database.transaction() as session:
            settled = await repository.move_line(
                session, line.batch_id, line.line, ("running", "stopping"), state="done", **_settled(line, row)
            )
            if settled and row is not None and row.usage:
                await repository.add_usage(session, line.batch_id, row.usage)
            if settled and row is not None and not line.keep_response:
                await responses.delete_response(session, row.id, row.tenant)
    return len(ended)
