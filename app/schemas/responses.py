"""The Response object and the other bodies the routes return, named and shaped as the openai SDK's types."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.schemas.items import Item, MessageItem

ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class Usage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class ResponseError(BaseModel):
    code: str
    message: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter", "steered"]


class InputTransformation(BaseModel):
    """A reasoning input item withheld from the model (the SDK's Response.input_transformations entry)."""

    id: str
    action: Literal["removed"] = "removed"
    reason: Literal["organization_mismatch", "end_user_mismatch", "model_mismatch", "prefix_mismatch", "turn_boundary"]
    type: Literal["reasoning"] = "reasoning"


class ConversationRef(BaseModel):
    """The conversation a response belongs to (the SDK's `Response.conversation`)."""

    id: str


def default_text() -> dict[str, Any]:
    return {"format": {"type": "text"}, "verbosity": "medium"}


class ResponseParams(BaseModel):
    """What a request asked for, echoed on its Response; chained requests do not inherit any of it."""

    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    parallel_tool_calls: bool = True
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    #: The SDK's PromptCacheOptions as applied (mode, ttl, comparison_response_id); None when not asked for.
    prompt_cache_options: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    safety_identifier: str | None = None
    service_tier: str = "default"
    store: bool = True
    background: bool = False
    conversation: ConversationRef | None = None
    temperature: float = 1.0
    text: dict[str, Any] = Field(default_factory=default_text)
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_logprobs: int = 0
    top_p: float = 1.0
    truncation: Literal["auto", "disabled"] = "disabled"
    user: str | None = None
    #: Not asked for but settled with them, before the response runs (and stored with them): the reasoning input
    #: items the model does not read, and why (None: it reads every one).
    input_transformations: list[InputTransformation] | None = None


class ResponseObject(ResponseParams):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    model: str
    output: list[Item] = Field(default_factory=list)
    previous_response_id: str | None = None
    usage: Usage | None = None
    #: Only on a response that names a comparison_response_id (app/prompt_cache/diagnosis.py).
    prompt_cache_diagnostics: dict[str, Any] | None = None
    # Declared by the SDK's Response for features this server does not run: always null here.
    prompt: dict[str, Any] | None = None
    access_programs: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None
    tool_usage: dict[str, Any] | None = None

    @property
    def output_text(self) -> str:
        return "".join(item.text for item in self.output if isinstance(item, MessageItem) and item.role == "assistant")
