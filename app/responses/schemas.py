"""The responses resource on the wire, beyond the Response itself (app/schemas/responses.py): the create body with
the Responses API's own bounds, the compact body and its answer, the list's filters and page, and the small
bodies of delete, input items and input token counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from app.prompt_cache.options import PromptCacheOptions
from app.schemas.item_ids import ClientId
from app.schemas.items import LOGPROBS_INCLUDE, Includable, Item, ItemList, ReasoningEffort, RequestInput
from app.schemas.metadata import check_metadata
from app.schemas.responses import ResponseObject, Usage

MAX_TOP_LOGPROBS = 20


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_schema", "json_object"]
    name: str | None = Field(None, pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _json_schema_needs_name_and_schema(self) -> TextFormat:
        if self.type == "json_schema":
            if self.name is None:
                raise ValueError("text.format of type 'json_schema' requires 'name'")
            if self.schema_ is None:
                raise ValueError("text.format of type 'json_schema' requires 'schema'")
        return self


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="allow")
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(BaseModel):
    model_config = ConfigDict(extra="allow")
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ConversationParam(BaseModel):
    id: Annotated[ClientId, Field(min_length=1)]


ConversationField = Annotated[
    Annotated[ClientId, Tag("kind:text")] | Annotated[ConversationParam, Tag("kind:object")],
    Discriminator(lambda value: "kind:text" if isinstance(value, str) else "kind:object"),
]


class ContextManagement(BaseModel):
    """`context_management: [{type: "compaction", compact_threshold}]`: compact once the context passes it."""

    type: Literal["compaction"]
    compact_threshold: int | None = Field(None, ge=1)


class CreateResponseRequest(BaseModel):
    # NOTE: fields the API does not define are ignored (agents send extension fields such as Codex's
    # `client_metadata`); strict mode rejects them before this model is built.
    model_config = ConfigDict(extra="ignore")

    input: RequestInput
    model: str | None = None
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=16)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    metadata: dict[str, str] | None = None
    store: bool | None = None
    stream: bool | None = None
    previous_response_id: ClientId | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = Field(None, ge=1)
    include: list[Includable] | None = None
    stream_options: dict[str, Any] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    # NOTE: not in the SDK's create params (Chat Completions has them); independent validators of the Responses
    # API expect them on every Response, and llama.cpp's penalty sampler runs them. Send with extra_body.
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    background: bool | None = None
    conversation: ConversationField | None = None
    context_management: list[ContextManagement] | None = Field(None, max_length=1)
    prompt_cache_options: PromptCacheOptions | None = None
    # Defined by the API, not run by us yet: accepted here so that the service can name them in a 400.
    prompt: dict[str, Any] | None = None
    background_options: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    access_programs: dict[str, Any] | None = None

    @property
    def wants_logprobs(self) -> bool:
        """Logprobs are computed (and reported) only when asked for: by the include, or top_logprobs > 0."""
        return LOGPROBS_INCLUDE in (self.include or []) or bool(self.top_logprobs)

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_metadata(value)


#: Fields that the API defines but this server does not run yet; any value other than "off" is a 400.
NOT_IMPLEMENTED_FIELDS: dict[str, object] = {
    "prompt": None,
    "background_options": None,
    "moderation": None,
    "image": None,
    "access_programs": None,
}

#: Every top-level field the API defines (for strict mode's unknown_parameter check).
KNOWN_FIELDS = frozenset(CreateResponseRequest.model_fields)

#: The fields of POST /v1/responses/input_tokens (the SDK's InputTokenCountParams): those that shape the prompt.
COUNT_FIELDS = frozenset(
    {
        "conversation",
        "input",
        "instructions",
        "model",
        "parallel_tool_calls",
        "personality",
        "previous_response_id",
        "reasoning",
        "text",
        "tool_choice",
        "tools",
        "truncation",
    }
)


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class InputItemList(ItemList):
    """GET /v1/responses/{id}/input_items."""


class InputTokenCount(BaseModel):
    """POST /v1/responses/input_tokens: the SDK's InputTokenCountResponse."""

    object: Literal["response.input_tokens"] = "response.input_tokens"
    input_tokens: int


# GET /v1/responses (an extension: the hosted API has no list of responses): its filters and its page.


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


# POST /v1/responses/compact: the SDK's ResponseCompactParams and CompactedResponse.


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
