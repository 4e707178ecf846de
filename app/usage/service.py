"""Reading usage: the query checked (dates, the range's bound, the grouping, the model), the caller's scope (a
member its own project's; an admin any project's, or every one's) and the report as JSON or CSV; a project's
stored bytes and quota."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import get_args

from app.db.session import Database
from app.errors import InvalidRequest
from app.keys.service import tenant_of_project_name
from app.quotas.stored_bytes import read_stored_bytes
from app.runtime import Runtime
from app.tenants.identity import OPEN_TENANT, Identity
from app.usage import repository
from app.usage.repository import Grouping
from app.usage.schemas import StorageUsage, UsageCounters, UsageReport, UsageResult

#: The most days one report covers (a year, a leap day included): a longer range is asked for in pages.
MAX_RANGE_DAYS = 366
#: The days a report covers when `start` is not given (ending with `end`).
DEFAULT_RANGE_DAYS = 30
GROUPINGS: tuple[Grouping, ...] = get_args(Grouping)
#: The longest model or project a query names.
MAX_NAME_CHARS = 256


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """What the client asked, as sent (strings, checked by `read_usage`)."""

    start: str | None = None
    end: str | None = None
    model: str | None = None
    group_by: str | None = None
    project: str | None = None


def _day(value: str, param: str) -> date:
    try:
        if len(value) != 10:
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(
            f"Invalid '{param}': expected a date as YYYY-MM-DD, got '{value[:40]}'.", param=param, code="invalid_value"
        ) from None


def _range(query: UsageQuery, today: date) -> tuple[date, date]:
    end = _day(query.end, "end") if query.end else today
    start = _day(query.start, "start") if query.start else end - timedelta(days=DEFAULT_RANGE_DAYS - 1)
    if start > end:
        raise InvalidRequest("'start' must not be after 'end'.", param="start", code="invalid_value")
    if (end - start).days + 1 > MAX_RANGE_DAYS:
        raise InvalidRequest(
            f"The range from 'start' to 'end' spans {(end - start).days + 1} days; at most {MAX_RANGE_DAYS} are "
            "read at once: ask for the rest in another request.",
            param="start",
            code="invalid_value",
        )
    return start, end


def _grouping(value: str | None) -> list[Grouping]:
    if not value:
        return ["day"]
    names = [name.strip() for name in value.split(",")]
    unknown = [name for name in names if name not in GROUPINGS]
    if unknown or len(set(names)) != len(names):
        raise InvalidRequest(
            f"Invalid 'group_by': '{value[:80]}'. Use one or more of {', '.join(GROUPINGS)}, separated by commas, "
            "each once.",
            param="group_by",
            code="invalid_value",
        )
    return [name for name in GROUPINGS if name in names]  # one order whatever the client's: day, project, model


def _text(value: str | None, param: str) -> str | None:
    if value is None:
        return None
    if not value or len(value) > MAX_NAME_CHARS or any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise InvalidRequest(f"Invalid '{param}'.", param=param, code="invalid_value")
    return value


async def _scope(database: Database, identity: Identity, project: str | None) -> str | None:
    """The tenant whose usage the caller reads: None for every tenant (an admin who names none)."""
    if project is None:
        return None if identity.role == "admin" and identity.authenticated else identity.tenant
    # A tenant as the report names it ("key:...", "project:...", "public"), or a project's name.
    tenant = project if ":" in project or project == OPEN_TENANT else await tenant_of_project_name(database, project)
    if tenant != identity.tenant:
        identity.require_admin()  # 403 unless an admin: a member reads its own project's usage only
    return tenant


async def read_usage(
    database: Database, identity: Identity, query: UsageQuery, *, today: date | None = None
) -> UsageReport:
    """The report the query asks for, within the caller's scope. `today` (UTC): the default `end`."""
    start, end = _range(query, today or datetime.now(UTC).date())
    group_by = _grouping(query.group_by)
    model = _text(query.model, "model")
    tenant = await _scope(database, identity, _text(query.project, "project"))
    async with database.read() as session:
        rows = await repository.sums(session, tenant=tenant, start=start, end=end, model=model, group_by=group_by)
        names = await repository.project_names(session, {row.project for row in rows if row.project is not None})
    results = [
        UsageResult(
            date=row.day.isoformat() if row.day is not None else None,
            project=row.project,
            project_name=names.get(row.project) if row.project is not None else None,
            model=row.model,
            num_model_requests=row.requests,
            input_tokens=row.input_tokens,
            input_cached_tokens=row.cached_tokens,
            output_tokens=row.output_tokens,
            generation_seconds=round(row.generation_s, 3),
        )
        for row in rows
        if row.requests  # no grouping and no row: one row of nulls
    ]
    totals = UsageCounters(
        num_model_requests=sum(result.num_model_requests for result in results),
        input_tokens=sum(result.input_tokens for result in results),
        input_cached_tokens=sum(result.input_cached_tokens for result in results),
        output_tokens=sum(result.output_tokens for result in results),
        generation_seconds=round(sum(result.generation_seconds for result in results), 3),
    )
    return UsageReport(start=start.isoformat(), end=end.isoformat(), group_by=group_by, data=results, totals=totals)


async def read_storage(runtime: Runtime, identity: Identity, project: str | None) -> StorageUsage:
    """The stored bytes and limit of the caller's project, or (an admin) of the one `project` names."""
    tenant = await _scope(runtime.database, identity, _text(project, "project")) or identity.tenant
    stored = await read_stored_bytes(runtime, tenant)
    return StorageUsage(
        project=tenant,
        stored_bytes=stored.bytes,
        limit_bytes=stored.limit or None,
        measured_at=int(stored.measured_at.timestamp()) if stored.measured_at else None,
    )


#: The CSV's counter columns, after the grouping's.
CSV_COUNTERS = ("num_model_requests", "input_tokens", "input_cached_tokens", "output_tokens", "generation_seconds")
CSV_KEYS = {"day": ("date",), "project": ("project", "project_name"), "model": ("model",)}


def _cell(value: object) -> str:
    """A cell as text; one a spreadsheet would read as a formula (=, +, -, @) is quoted as text."""
    text = "" if value is None else str(value)
    return "'" + text if isinstance(value, str) and text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def as_csv(report: UsageReport) -> str:
    """The report's rows as CSV: a header, then one line a group (the grouping's columns, then the counters)."""
    columns = [column for name in report.group_by for column in CSV_KEYS[name]] + list(CSV_COUNTERS)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(columns)
    for result in report.data:
        values = result.model_dump()
        writer.writerow([_cell(values[column]) for column in columns])
    return out.getvalue()


def csv_filename(report: UsageReport) -> str:
    return f"usage-{report.start}-{report.end}.csv"
