"""Queries on the `usage` table: the one upsert each response's end makes, the report's sums, and retention.

NOTE: the upsert is INSERT ... ON CONFLICT DO UPDATE in the dialect's own form (SQLite and Postgres both have it):
one statement, atomic under concurrent ends of one tenant's responses, with no read first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import ProjectRow, UsageDayRow

#: What a report may be grouped by (its rows' keys), in the order the rows are sorted.
Grouping = Literal["day", "project", "model"]
GROUP_COLUMNS = {"day": UsageDayRow.day, "project": UsageDayRow.tenant, "model": UsageDayRow.model}
COUNTERS = ("requests", "input_tokens", "cached_tokens", "output_tokens", "generation_s")


@dataclass(frozen=True, slots=True)
class UsageEntry:
    """One response's part of its tenant's day with its model."""

    tenant: str
    model: str
    day: date
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    generation_s: float = 0.0


def entry_of(
    *, tenant: str, model: str, day: date, usage: dict[str, Any] | None, generation_s: float = 0.0
) -> UsageEntry:
    """The entry of a response with this (Response-shaped, as JSON) `usage`; None counts the request alone."""
    usage = usage or {}
    details = usage.get("input_tokens_details") or {}
    return UsageEntry(
        tenant=tenant,
        model=model,
        day=day,
        input_tokens=int(usage.get("input_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        generation_s=max(generation_s, 0.0),
    )


@dataclass(frozen=True, slots=True)
class UsageSums:
    """The counters of one group of a report; the keys it is not grouped by are None."""

    day: date | None
    project: str | None
    model: str | None
    requests: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    generation_s: float


async def add(session: AsyncSession, entry: UsageEntry) -> None:
    """Add one request and its tokens and seconds to its row, creating the row for the day's first."""
    values = {
        "tenant": entry.tenant,
        "model": entry.model,
        "day": entry.day,
        "requests": 1,
        "input_tokens": entry.input_tokens,
        "cached_tokens": entry.cached_tokens,
        "output_tokens": entry.output_tokens,
        "generation_s": entry.generation_s,
    }
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(UsageDayRow).values(**values)
    table = UsageDayRow.__table__.c
    statement = statement.on_conflict_do_update(
        index_elements=["tenant", "model", "day"],
        set_={name: table[name] + statement.excluded[name] for name in COUNTERS},
    )
    await session.execute(statement)


async def sums(
    session: AsyncSession,
    *,
    tenant: str | None,
    start: date,
    end: date,
    model: str | None,
    group_by: Sequence[Grouping],
) -> list[UsageSums]:
    """The counters summed per group (`group_by`'s columns first, then the sums, in COUNTERS' order), for the days
    from `start` to `end` inclusive, of one tenant (None: every tenant) and one model (None: every model)."""
    keys = [GROUP_COLUMNS[name].label(name) for name in group_by]
    totals = [func.sum(getattr(UsageDayRow, name)).label(name) for name in COUNTERS]
    query = select(*keys, *totals).where(UsageDayRow.day >= start, UsageDayRow.day <= end)
    if tenant is not None:
        query = query.where(UsageDayRow.tenant == tenant)
    if model is not None:
        query = query.where(UsageDayRow.model == model)
    if keys:
        query = query.group_by(*keys).order_by(*keys)
    sums = []
    for row in (await session.execute(query)).all():
        values = row._mapping
        sums.append(
            UsageSums(
                day=values.get("day"),
                project=values.get("project"),
                model=values.get("model"),
                requests=int(values["requests"] or 0),
                input_tokens=int(values["input_tokens"] or 0),
                cached_tokens=int(values["cached_tokens"] or 0),
                output_tokens=int(values["output_tokens"] or 0),
                generation_s=float(values["generation_s"] or 0.0),
            )
        )
    return sums


async def project_names(session: AsyncSession, tenants: set[str]) -> dict[str, str]:
    """The names of the projects these tenants stand for ("project:" + id), by tenant; other tenants have none."""
    ids = {tenant.removeprefix("project:"): tenant for tenant in tenants if tenant.startswith("project:")}
    if not ids:
        return {}
    query = select(ProjectRow.id, ProjectRow.name).where(ProjectRow.id.in_(ids))
    return {ids[project_id]: name for project_id, name in (await session.execute(query)).all()}


async def prune(session: AsyncSession, *, before: date) -> int:
    """Delete the rows of days before `before`; how many."""
    result = await session.execute(delete(UsageDayRow).where(UsageDayRow.day < before))
    return int(getattr(result, "rowcount", 0))
