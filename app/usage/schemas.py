"""Usage on the wire (GET /v1/usage, an extension): the counters are named as the openai SDK's organization usage
results name them (`num_model_requests`, `input_tokens`, `input_cached_tokens`, `output_tokens`), with
`generation_seconds` beside them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class UsageCounters(BaseModel):
    #: Responses created (counted at their end, whatever their status: failed and cancelled ones included).
    num_model_requests: int = 0
    input_tokens: int = 0
    #: Of the input tokens, those read from reused KV state.
    input_cached_tokens: int = 0
    output_tokens: int = 0
    #: Time spent generating (prefill and decode), queue wait excluded.
    generation_seconds: float = 0.0


class UsageResult(UsageCounters):
    """The counters of one group; the fields it is not grouped by are null."""

    object: Literal["usage.result"] = "usage.result"
    #: The UTC day (YYYY-MM-DD) the responses were created on.
    date: str | None = None
    #: The tenant: "project:<id>", "key:<hash>" (a bootstrap key) or "public" (an open server).
    project: str | None = None
    #: The project's name, for a project's tenant.
    project_name: str | None = None
    model: str | None = None


class UsageReport(BaseModel):
    object: Literal["list"] = "list"
    #: The first and last UTC day of the report, inclusive.
    start: str
    end: str
    group_by: list[Literal["day", "project", "model"]]
    data: list[UsageResult]
    #: The sums of every group.
    totals: UsageCounters


class StorageUsage(BaseModel):
    """GET /v1/usage/storage: what a project keeps stored now, against its quota."""

    object: Literal["usage.storage"] = "usage.storage"
    #: The tenant, as reports name it.
    project: str
    #: Its stored bytes as counted: the last measurement, plus the writes charged since (while it has a limit).
    stored_bytes: int
    #: The most it may keep stored (RESPONSES_MAX_STORED_BYTES_PER_TENANT); null: no limit.
    limit_bytes: int | None
    #: When the last measurement counted it (Unix seconds); null before the first, or while it stores nothing.
    measured_at: int | None
