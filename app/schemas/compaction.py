"""`POST /v1/responses/compact` on the wire: the SDK's ResponseCompactParams and CompactedResponse."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from app.schemas.items import ClientId, Item, RequestInput
from app.schemas.responses import Usage


class CompactRequest(BaseModel):
    # NOTE: like create, fields the API does not define are ignored (strict mode rejects them).
    model_config = ConfigDict(extra="ignore")

    model: str | None
    input: RequestInput | None = None
    instructions: str | None = None
    previous_response_id: ClientId | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: Literal["auto", "default", "fast", "flex", "scale", "priority"] | None = None
    # Defined by the API, not run by us: a 400 naming them when set.
    image: dict[str, Any] | None = None
    prompt_cache_options: dict[str, Any] | None = None


#: Fields of CompactRequest that we do not run; any value but None is a 400.
COMPACT_NOT_IMPLEMENTED = ("image", "prompt_cache_options")
KNOWN_COMPACT_FIELDS = frozenset(CompactRequest.model_fields)


class CompactedResponse(BaseModel):
    id: str
    object: Literal["response.compaction"] = "response.compaction"
    created_at: int
    output: list[Item]
    usage: Usage
