"""GET /v1/responses (an extension: the hosted API has no list of responses): its filters and its page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from app.schemas.responses import ResponseObject


@dataclass(frozen=True, slots=True)
class ResponseFilters:
    status: str | None = None
    model: str | None = None
    #: The responses that continue this one (a chain's next turns).
    previous_response_id: str | None = None
    #: metadata[key]=value: every pair must match.
    metadata: dict[str, str] = field(default_factory=dict)
    #: Unix seconds: created at or after this one ...
    created_after: int | None = None
    #: ... and before this one.
    created_before: int | None = None


class ResponseList(BaseModel):
    """One page of stored responses, shaped as the SDK's cursor pages."""

    object: Literal["list"] = "list"
    data: list[ResponseObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
