"""The Batch API: create (checked, then `validating`), retrieve, list, cancel. The batch then moves on in the
periodic advance (advance.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from app.batches import repository
from app.batches.schemas import (
    BATCH_ENDPOINTS,
    COMPLETION_WINDOWS,
    BatchErrors,
    BatchList,
    BatchObject,
    BatchRequestCounts,
    BatchUsage,
    CreateBatchRequest,
    InputTokensDetails,
    OutputTokensDetails,
)
from app.db.base import utc_now
from app.db.models import BatchRow
from app.db.session import Database
from app.errors import InvalidRequest, NotFound
from app.files import repository as files
from app.ids import new_id
from app.quotas.stored_bytes import charge_stored_bytes, json_size
from app.runtime import Runtime
from app.schemas.paging import PageRequest, cursor_page, page_after

#: The completion window, the only one there is ("24h").
WINDOW = timedelta(hours=24)
#: A batch may be cancelled while it is in one of these.
CANCELLABLE = ("validating", "in_progress")


def batch_not_found(batch_id: str) -> NotFound:
    return NotFound(f"No batch found with id '{batch_id}'.", param="batch_id")


def _unix(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def batch_object(row: BatchRow) -> BatchObject:
    return BatchObject(
        id=row.id,
        endpoint=row.endpoint,
        completion_window=row.completion_window,
        input_file_id=row.input_file_id,
        status=row.status,
        created_at=int(row.created_at.timestamp()),
        expires_at=_unix(row.expires_at),
        in_progress_at=_unix(row.in_progress_at),
        finalizing_at=_unix(row.finalizing_at),
        completed_at=_unix(row.completed_at),
        failed_at=_unix(row.failed_at),
        expired_at=_unix(row.expired_at),
        cancelling_at=_unix(row.cancelling_at),
        cancelled_at=_unix(row.cancelled_at),
        output_file_id=row.output_file_id,
        error_file_id=row.error_file_id,
        errors=BatchErrors.model_validate(row.errors) if row.errors is not None else None,
        metadata=row.metadata_,
        model=row.model,
        request_counts=BatchRequestCounts(completed=row.completed, failed=row.failed, total=row.total),
        usage=BatchUsage(
            input_tokens=row.input_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=row.cached_tokens),
            output_tokens=row.output_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=row.reasoning_tokens),
            total_tokens=row.input_tokens + row.output_tokens,
        ),
    )


def _check_request(body: CreateBatchRequest) -> None:
    if body.endpoint not in BATCH_ENDPOINTS:
        # NOTE: the hosted API also batches chat completions, embeddings...; this server serves /v1/responses.
        raise InvalidRequest(
            f"Invalid value for 'endpoint': '{body.endpoint[:64]}'. Only '/v1/responses' is supported for now.",
            param="endpoint",
            code="invalid_value",
        )
    if body.completion_window not in COMPLETION_WINDOWS:
        raise InvalidRequest(
            f"Invalid value for 'completion_window': '{body.completion_window[:16]}'. Only '24h' is supported.",
            param="completion_window",
            code="invalid_value",
        )


async def create_batch(runtime: Runtime, tenant: str, body: CreateBatchRequest) -> BatchObject:
    """Stored `validating`; refused at once (a 429) while the tenant is at its stored-bytes quota: each line's
    response is charged as it is submitted, and a line refused so becomes an error line."""
    _check_request(body)
    now = utc_now()
    row = BatchRow(
        id=new_id("batch"),
        tenant=tenant,
        status="validating",
        endpoint=body.endpoint,
        completion_window=body.completion_window,
        input_file_id=body.input_file_id,
        metadata_=body.metadata,
        total=0,
        completed=0,
        failed=0,
        input_tokens=0,
        cached_tokens=0,
        output_tokens=0,
        reasoning_tokens=0,
        created_at=now,
        expires_at=now + WINDOW,
    )
    async with runtime.database.transaction() as session:
        stored = await files.get_file(session, body.input_file_id, tenant)
        if stored is None:  # no such file, or another tenant's
            raise NotFound(f"No such File object: {body.input_file_id[:64]}", param="input_file_id")
        if stored.purpose != "batch":
            raise InvalidRequest(
                f"Invalid 'input_file_id': file {stored.id} has purpose '{stored.purpose}'; a batch's input file must "
                "be uploaded with purpose 'batch'.",
                param="input_file_id",
                code="invalid_file_purpose",
            )
        await repository.insert_batch(session, row)
        await charge_stored_bytes(session, runtime, tenant, lambda: json_size(row.metadata_))
    return batch_object(row)


async def get_batch(database: Database, batch_id: str, tenant: str) -> BatchObject:
    async with database.read() as session:
        row = await repository.get_batch(session, batch_id, tenant)
    if row is None:
        raise batch_not_found(batch_id)
    return batch_object(row)


async def list_batches(database: Database, tenant: str, page: PageRequest) -> BatchList:
    async with database.read() as session:
        rows, has_more = await page_after(
            page,
            lambda after: repository.get_batch(session, after, tenant),
            lambda after: repository.page_batches(session, tenant, limit=page.limit, after=after),
            unknown_after=lambda after: f"Invalid 'after': no batch '{after}'.",
        )
    return cursor_page(BatchList, [batch_object(row) for row in rows], has_more)


async def cancel_batch(database: Database, batch_id: str, tenant: str) -> BatchObject:
    """`cancelling` at once; the periodic advance stops its lines and ends it `cancelled`, output kept."""
    async with database.transaction() as session:
        row = await repository.get_batch(session, batch_id, tenant)
        if row is None:
            raise batch_not_found(batch_id)
        if row.status not in (*CANCELLABLE, "cancelling"):
            raise InvalidRequest(
                f"Cannot cancel a batch with status '{row.status}'.", param="batch_id", code="invalid_value"
            )
        await repository.move_batch(session, batch_id, CANCELLABLE, status="cancelling", cancelling_at=utc_now())
        await session.refresh(row)  # as the conditional UPDATE left it
        return batch_object(row)
