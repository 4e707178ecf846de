"""The Response object a stored row stands for: the one conversion every read path uses."""

from __future__ import annotations

from datetime import datetime

from app.db.models import ResponseRow
from app.schemas.responses import ResponseObject


def _unix(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def response_from_row(row: ResponseRow) -> ResponseObject:
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
        }
    )
