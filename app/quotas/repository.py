"""Queries on the `tenant_storage` table and the measurement of every tenant's stored bytes.

The measure is one aggregate query a table, grouped by tenant (a child table through its parent's tenant): the
characters of its stored columns (JSON as its text) summed, on SQLite and Postgres alike. A file counts its
`files.bytes`, which its chunks hold exactly, so that the measure never reads the chunks themselves.

NOTE: the charge is INSERT ... ON CONFLICT DO UPDATE ... RETURNING in the dialect's own form: one atomic statement
that adds to the tenant's row and says its new total. On Postgres it locks the row until the writer's commit, so a
tenant's concurrent writes see each other's charges and a burst cannot pass the limit."""

from __future__ import annotations

import typing
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, Text, bindparam, cast, func, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from app.db.models import (
    BatchLineRow,
    BatchRow,
    ConversationItemRow,
    ConversationRow,
    FileRow,
    GenerationProgressRow,
    InputItemRow,
    OutputItemRow,
    ResponseEventRow,
    ResponseRow,
    TenantStorageRow,
    VectorStoreChunkRow,
    VectorStoreFileRow,
    VectorStoreRow,
    WebhookDeliveryRow,
    WebhookEndpointRow,
)


def _characters(*columns: InstrumentedAttribute[Any]) -> ColumnElement[int]:
    """The characters these columns hold as text (JSON as stored), a NULL as none."""
    total: ColumnElement[int] = literal(0)
    for column in columns:
        total = total + func.coalesce(func.length(cast(column, Text)), 0)
    return total


def _per_tenant(tenant: InstrumentedAttribute[str], size: ColumnElement[int]) -> Select[str, int]:
    return select(tenant, func.sum(size)).group_by(tenant)


#: One query a table that holds a tenant's data: (tenant, its bytes there). The tables not named hold no
#: tenant's data (projects, keys, secrets, usage counters, this table).
MEASURES: dict[str, Select[str, int]] = {
    "responses": _per_tenant(
        ResponseRow.tenant,
        _characters(
            ResponseRow.params,
            ResponseRow.output,
            ResponseRow.usage,
            ResponseRow.error,
            ResponseRow.incomplete_details,
            ResponseRow.job,
            ResponseRow.prompt_cache_fingerprint,
            ResponseRow.prompt_cache_diagnostics,
        ),
    ),
    "input_items": _per_tenant(ResponseRow.tenant, _characters(InputItemRow.item)).join_from(
        ResponseRow, InputItemRow, InputItemRow.response_id == ResponseRow.id
    ),
    "output_items": _per_tenant(ResponseRow.tenant, _characters(OutputItemRow.item_id)).join_from(
        ResponseRow, OutputItemRow, OutputItemRow.response_id == ResponseRow.id
    ),
    "response_events": _per_tenant(ResponseRow.tenant, _characters(ResponseEventRow.event)).join_from(
        ResponseRow, ResponseEventRow, ResponseEventRow.response_id == ResponseRow.id
    ),
    "generation_progress": _per_tenant(
        ResponseRow.tenant, _characters(GenerationProgressRow.pieces, GenerationProgressRow.ids)
    ).join_from(ResponseRow, GenerationProgressRow, GenerationProgressRow.response_id == ResponseRow.id),
    "conversations": _per_tenant(ConversationRow.tenant, _characters(ConversationRow.metadata_)),
    "conversation_items": _per_tenant(ConversationRow.tenant, _characters(ConversationItemRow.item)).join_from(
        ConversationRow, ConversationItemRow, ConversationItemRow.conversation_id == ConversationRow.id
    ),
    # file_chunks: counted by the size of their file (the chunks hold exactly `bytes`).
    "files": _per_tenant(FileRow.tenant, FileRow.bytes + _characters(FileRow.filename)),
    "batches": _per_tenant(BatchRow.tenant, _characters(BatchRow.metadata_, BatchRow.errors)),
    "batch_lines": _per_tenant(
        BatchRow.tenant,
        _characters(BatchLineRow.custom_id, BatchLineRow.body, BatchLineRow.result, BatchLineRow.error),
    ).join_from(BatchRow, BatchLineRow, BatchLineRow.batch_id == BatchRow.id),
    "webhook_endpoints": _per_tenant(
        WebhookEndpointRow.tenant,
        _characters(
            WebhookEndpointRow.name,
            WebhookEndpointRow.url,
            WebhookEndpointRow.event_types,
            WebhookEndpointRow.sealed_secret,
            WebhookEndpointRow.previous_sealed_secret,
        ),
    ),
    "vector_stores": _per_tenant(
        VectorStoreRow.tenant, _characters(VectorStoreRow.name, VectorStoreRow.description, VectorStoreRow.metadata_)
    ),
    "vector_store_files": _per_tenant(VectorStoreFileRow.tenant, _characters(VectorStoreFileRow.attributes)),
    # A chunk: its text and its embedding's bytes (what its file's usage_bytes counts).
    "vector_store_chunks": _per_tenant(
        VectorStoreRow.tenant,
        _characters(VectorStoreChunkRow.text) + func.coalesce(func.length(VectorStoreChunkRow.embedding), 0),
    ).join_from(VectorStoreRow, VectorStoreChunkRow, VectorStoreChunkRow.vector_store_id == VectorStoreRow.id),
    "webhook_deliveries": _per_tenant(
        WebhookDeliveryRow.tenant,
        _characters(WebhookDeliveryRow.body, WebhookDeliveryRow.last_error),
    ),
}


async def measure_table(session: AsyncSession, table: str) -> dict[str, int]:
    """Each tenant's bytes in one table (tenants with no rows there are absent)."""
    rows = (await session.execute(MEASURES[table])).all()
    return {tenant: int(size or 0) for tenant, size in rows}


async def measure(session: AsyncSession) -> Counter[str]:
    """Each tenant's stored bytes across every table (tenants with nothing stored are absent)."""
    totals: Counter[str] = Counter()
    for table in MEASURES:
        totals.update(await measure_table(session, table))
    return totals


async def counters(session: AsyncSession) -> dict[str, tuple[int, datetime | None]]:
    """Every tenant's counter as it stands: its bytes and when it was last measured."""
    rows = await session.execute(select(TenantStorageRow.tenant, TenantStorageRow.bytes, TenantStorageRow.measured_at))
    return {tenant: (size, measured_at) for tenant, size, measured_at in rows.all()}


async def record_measurement(
    session: AsyncSession,
    totals: Mapping[str, int],
    seen: Mapping[str, tuple[int, datetime | None]],
    measured_at: datetime,
) -> None:
    """Set each counter to its measurement plus what was charged to it since `seen` (read before the measure).

    Each counter moves by (measured - seen), so that a charge committed after the counters were read stays in it
    (one committed between that read and the measure counts twice until the next measurement: the safe side).
    A counter another node measured meanwhile (its `measured_at` moved) keeps that node's measurement."""
    table = typing.cast(Table, TenantStorageRow.__table__)
    if seen:
        moved = (
            update(table)
            .where(table.c.tenant == bindparam("t"), table.c.measured_at.is_not_distinct_from(bindparam("seen_at")))
            .values(bytes=table.c.bytes + bindparam("delta"), measured_at=measured_at)
        )
        changes = [
            {"t": tenant, "delta": totals.get(tenant, 0) - size, "seen_at": seen_at}
            for tenant, (size, seen_at) in seen.items()
        ]
        await session.execute(moved, changes)
    new = [
        {"tenant": tenant, "bytes": size, "measured_at": measured_at}
        for tenant, size in totals.items()
        if tenant not in seen
    ]
    if new:
        upsert = _insert(session)(table)
        # A row made since by a charge (never measured): the measurement is added to its charges.
        upsert = upsert.on_conflict_do_update(
            index_elements=["tenant"],
            set_={"bytes": table.c.bytes + upsert.excluded.bytes, "measured_at": upsert.excluded.measured_at},
            where=table.c.measured_at.is_(None),
        )
        await session.execute(upsert, new)


def _insert(session: AsyncSession) -> Callable[..., Any]:
    """INSERT in the dialect's own form (its ON CONFLICT clause)."""
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


async def charge(session: AsyncSession, tenant: str, added_bytes: int) -> int:
    """Add `added_bytes` to the tenant's row (created on its first write); its new total."""
    statement = _insert(session)(TenantStorageRow).values(tenant=tenant, bytes=added_bytes, measured_at=None)
    statement = statement.on_conflict_do_update(
        index_elements=["tenant"], set_={"bytes": TenantStorageRow.bytes + statement.excluded.bytes}
    )
    return int((await session.execute(statement.returning(TenantStorageRow.bytes))).scalar_one())


async def stored_bytes(session: AsyncSession, tenant: str) -> TenantStorageRow | None:
    """The tenant's row: None while it has nothing stored (as last measured) and has charged nothing since."""
    return await session.get(TenantStorageRow, tenant)
