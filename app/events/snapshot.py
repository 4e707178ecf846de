"""The Response object a stored response stands for: the one conversion every read path uses (GET, lists, the
terminal event a stream ends with when its own never came)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from app.schemas.responses import ResponseObject


class StoredResponse(Protocol):
    """What the conversion reads of a stored response (the `responses` row: app/db/models/response.py), named
    here so that protocol code needs no database import."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def background(self) -> bool: ...
    @property
    def previous_response_id(self) -> str | None: ...
    @property
    def params(self) -> dict[str, Any]: ...
    @property
    def output(self) -> list[dict[str, Any]]: ...
    @property
    def usage(self) -> dict[str, Any] | None: ...
    @property
    def error(self) -> dict[str, Any] | None: ...
    @property
    def incomplete_details(self) -> dict[str, Any] | None: ...
    @property
    def prompt_cache_diagnostics(self) -> dict[str, Any] | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def completed_at(self) -> datetime | None: ...


def _unix(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def response_from_row(row: StoredResponse) -> ResponseObject:
    return ResponseObject.model_validate(
        {
            **row.params,
            "id": row.id,
            "created_at": _unix(row.created_at),
            "completed_at": _unix(row.completed_at),
            "status": row.status,
            "background": row.background,
            "model": row.model,
            "previous_response_id": row.previous_response_id,
            "output": row.output,
            "usage": row.usage,
            "error": row.error,
            "incomplete_details": row.incomplete_details,
            "prompt_cache_diagnostics": row.prompt_cache_diagnostics,
        }
    )
