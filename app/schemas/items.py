"""Items on the wire: what a request may send as input, and the message items we store and return."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, field_validator

from app.schemas.client_tool_items import (
    CLIENT_CALL_OUTPUT_TYPES,
    CLIENT_CALL_TYPES,
    ApplyPatchCallItem,
    ApplyPatchCallOutputItem,
    LocalShellCallItem,
    LocalShellCallOutputItem,
    ShellCallItem,
    ShellCallOutputItem,
    StoredApplyPatchCall,
    StoredApplyPatchCallOutput,
    StoredLocalShellCall,
    StoredLocalShellCallOutput,
    StoredShellCall,
    StoredShellCallOutput,
    StoredToolSearchCall,
    StoredToolSearchOutput,
    ToolSearchCallItem,
    ToolSearchOutputItem,
)
from app.schemas.hosted_items import StoredFileSearchCall, StoredWebSearchCall
from app.schemas.item_ids import ClientId, ItemStatus, Role


class InputText(BaseModel):
    type: Literal["input_text"]
    text: str


class TopLogprob(BaseModel):
    token: str
    bytes: list[int]
    logprob: float


class TokenLogprob(BaseModel):
    """One token of an output_text part: its text, its UTF-8 bytes, its logprob, and the likeliest tokens."""

    token: str
    bytes: list[int]
    logprob: float
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class OutputText(BaseModel):
    type: Literal["output_text"]
    text: str
    annotations: list[Any] = Field(default_factory=list)
    #: Empty unless the request asked for logprobs (never null: the API's validators require a list).
    logprobs: list[TokenLogprob] = Field(default_factory=list)

    @field_validator("logprobs", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value


class Refusal(BaseModel):
    type: Literal["refusal"]
    refusal: str


class UnsupportedPart(BaseModel):
    """A content part the API defines but a text-only llama.cpp model cannot take (images, files, audio)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["input_image", "input_file", "input_audio"]


def _part_kind(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"part:{kind}" if isinstance(kind, str) else None


ContentPart = Annotated[
    Annotated[InputText, Tag("part:input_text")]
    | Annotated[OutputText, Tag("part:output_text")]
    | Annotated[Refusal, Tag("part:refusal")]
    | Annotated[UnsupportedPart, Tag("part:input_image")]
    | Annotated[UnsupportedPart, Tag("part:input_file")]
    | Annotated[UnsupportedPart, Tag("part:input_audio")],
    Discriminator(
        _part_kind,
        custom_error_type="invalid_content_part",
        custom_error_message="content parts must have a type of input_text, output_text or refusal",
    ),
]


def _text_or_list(value: Any) -> str:
    return "kind:text" if isinstance(value, str) else "kind:list"


MessageContent = Annotated[
    Annotated[str, Tag("kind:text")] | Annotated[list[ContentPart], Tag("kind:list")],
    Discriminator(_text_or_list),
]


class InputMessage(BaseModel):
    """A message in `input`; `type` may be left out (the SDK's EasyInputMessage)."""

    type: Literal["message"] = "message"
    role: Role
    content: MessageContent
    id: ClientId | None = None
    status: ItemStatus | None = None


class UnsupportedItem(BaseModel):
    """An input item type the API defines and we do not run yet: a 400 naming it, never silently dropped."""

    model_config = ConfigDict(extra="allow")
    type: str


class FunctionCallItem(BaseModel):
    """The model's call of a function tool (an output item), or the same call sent back as input."""

    type: Literal["function_call"] = "function_call"
    id: ClientId | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    namespace: str | None = None
    status: ItemStatus | None = "completed"


class FunctionCallOutputItem(BaseModel):
    """The client's answer to a function call, matched to it by call_id."""

    type: Literal["function_call_output"] = "function_call_output"
    id: ClientId | None = None
    call_id: str = Field(min_length=1)
    output: str | list[dict[str, Any]]
    status: ItemStatus | None = "completed"

    @property
    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(str(part.get("text", "")) for part in self.output)


class ReasoningText(BaseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class SummaryText(BaseModel):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningItem(BaseModel):
    """The model's reasoning before its answer (output), or the same sent back as input."""

    type: Literal["reasoning"] = "reasoning"
    id: ClientId | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    # NOTE: not encrypted: the reasoning text, base64-encoded, for stateless clients to send back.
    encrypted_content: str | None = None
    status: ItemStatus | None = None


class CustomToolCallItem(BaseModel):
    """The model's call of a custom tool: free-text input instead of JSON arguments."""

    type: Literal["custom_tool_call"] = "custom_tool_call"
    id: ClientId | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: str
    namespace: str | None = None


class CustomToolCallOutputItem(BaseModel):
    type: Literal["custom_tool_call_output"] = "custom_tool_call_output"
    id: ClientId | None = None
    call_id: str = Field(min_length=1)
    output: str | list[dict[str, Any]]


class ItemReference(BaseModel):
    """A stored item named by id (an input or output item of a stored response, or a conversation item)."""

    type: Literal["item_reference"] = "item_reference"
    id: Annotated[ClientId, Field(min_length=1)]


class CompactionItem(BaseModel):
    """What /v1/responses/compact (or automatic compaction) wrote: a summary only this server can read."""

    type: Literal["compaction"] = "compaction"
    id: ClientId | None = None
    encrypted_content: str = Field(min_length=1)
    # NOTE: left out when unset rather than null: the SDK takes either, the Open Responses schema only the first.
    created_by: str | None = Field(default=None, exclude_if=lambda value: value is None)


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class CompactionTriggerItem(BaseModel):
    """`{type: "compaction_trigger"}`, the last input item of a create: compact the context, then answer. Not
    stored (the SDK's ResponseItem has no such item): the compaction item in the output is its trace."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["compaction_trigger"]
    id: ClientId | None = None


class ConfigurationReasoning(BaseModel):
    model_config = ConfigDict(extra="forbid")
    effort: ReasoningEffort | None = None


class ConfigurationUpdateItem(BaseModel):
    """A change of the response configuration (only reasoning.effort, as the SDK says) for this and every later
    response of the chain or conversation, until another one replaces it."""

    # NOTE: forbid: a field we would not apply (text, say) is a 400 naming it, never silently ignored.
    model_config = ConfigDict(extra="forbid")
    type: Literal["configuration_update"]
    id: ClientId | None = None
    reasoning: ConfigurationReasoning | None = None


class McpListedTool(BaseModel):
    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    annotations: dict[str, Any] | None = None


class StoredMcpListTools(BaseModel):
    """The tools an MCP server offered (the SDK's McpListTools); `error` when they could not be listed. Also what
    a client resends as input (a stateless history): it counts as the chain's listing of that server_label."""

    id: ClientId
    type: Literal["mcp_list_tools"] = "mcp_list_tools"
    server_label: str
    tools: list[McpListedTool]
    error: str | None = None


class StoredMcpCall(BaseModel):
    """A call of an MCP server's tool, made by this server (the SDK's McpCall): `output`, or `error` (the SDK's
    McpToolCallError shapes: `mcp_tool_execution_error` or `mcp_protocol_error`). `approval_request_id`: the
    mcp_approval_request it was approved by."""

    id: ClientId
    type: Literal["mcp_call"] = "mcp_call"
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: dict[str, Any] | None = None
    status: Literal["in_progress", "completed", "incomplete", "calling", "failed"] = "completed"
    approval_request_id: str | None = None

    @field_validator("error", mode="before")
    @classmethod
    def _error_object(cls, value: Any) -> Any:
        # The SDK's input McpCall types `error` as a string; ours is the McpToolCallError object.
        return {"type": "mcp_protocol_error", "code": -32000, "message": value} if isinstance(value, str) else value


class StoredMcpApprovalRequest(BaseModel):
    """The model called an MCP tool that needs the client's approval (the SDK's McpApprovalRequest): not called;
    the response ended there, for an mcp_approval_response to answer."""

    id: ClientId
    type: Literal["mcp_approval_request"] = "mcp_approval_request"
    server_label: str
    name: str
    arguments: str


class McpApprovalResponseItem(BaseModel):
    """The client's answer to an mcp_approval_request (the SDK's McpApprovalResponse)."""

    type: Literal["mcp_approval_response"] = "mcp_approval_response"
    id: ClientId | None = None
    approval_request_id: Annotated[ClientId, Field(min_length=1)]
    approve: bool
    reason: str | None = None


class StoredMcpApprovalResponse(McpApprovalResponseItem):
    id: str


ITEM_KINDS = {
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "custom_tool_call",
    "custom_tool_call_output",
    "item_reference",
    "compaction",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "compaction_trigger",
    "configuration_update",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "tool_search_call",
    "tool_search_output",
    "file_search_call",
    "web_search_call",
}
#: Item types that call a tool, and the ones that answer such a call (matched by call_id).
CALL_TYPES = frozenset({"function_call", "custom_tool_call"}) | CLIENT_CALL_TYPES
CALL_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"}) | CLIENT_CALL_OUTPUT_TYPES


def _item_kind(value: Any) -> str:
    if isinstance(value, dict) and "type" not in value and "role" not in value and "id" in value:
        return "item:item_reference"  # the SDK's ItemReference may leave out its type
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", None)
    # A type that is not a string (an object, a list) is no kind we know; `in` would fail on unhashable ones.
    return f"item:{kind}" if isinstance(kind, str) and kind in ITEM_KINDS else "item:unsupported"


InputItem = Annotated[
    Annotated[InputMessage, Tag("item:message")]
    | Annotated[FunctionCallItem, Tag("item:function_call")]
    | Annotated[FunctionCallOutputItem, Tag("item:function_call_output")]
    | Annotated[ReasoningItem, Tag("item:reasoning")]
    | Annotated[CustomToolCallItem, Tag("item:custom_tool_call")]
    | Annotated[CustomToolCallOutputItem, Tag("item:custom_tool_call_output")]
    | Annotated[ItemReference, Tag("item:item_reference")]
    | Annotated[CompactionItem, Tag("item:compaction")]
    | Annotated[StoredMcpListTools, Tag("item:mcp_list_tools")]
    | Annotated[StoredMcpCall, Tag("item:mcp_call")]
    | Annotated[StoredMcpApprovalRequest, Tag("item:mcp_approval_request")]
    | Annotated[McpApprovalResponseItem, Tag("item:mcp_approval_response")]
    | Annotated[CompactionTriggerItem, Tag("item:compaction_trigger")]
    | Annotated[ConfigurationUpdateItem, Tag("item:configuration_update")]
    | Annotated[ShellCallItem, Tag("item:shell_call")]
    | Annotated[ShellCallOutputItem, Tag("item:shell_call_output")]
    | Annotated[ApplyPatchCallItem, Tag("item:apply_patch_call")]
    | Annotated[ApplyPatchCallOutputItem, Tag("item:apply_patch_call_output")]
    | Annotated[LocalShellCallItem, Tag("item:local_shell_call")]
    | Annotated[LocalShellCallOutputItem, Tag("item:local_shell_call_output")]
    | Annotated[ToolSearchCallItem, Tag("item:tool_search_call")]
    | Annotated[ToolSearchOutputItem, Tag("item:tool_search_output")]
    | Annotated[StoredFileSearchCall, Tag("item:file_search_call")]
    | Annotated[StoredWebSearchCall, Tag("item:web_search_call")]
    | Annotated[UnsupportedItem, Tag("item:unsupported")],
    Discriminator(_item_kind),
]


RequestInput = Annotated[
    Annotated[str, Tag("kind:text")] | Annotated[list[InputItem], Tag("kind:list")],
    Discriminator(_text_or_list),
]


class MessageItem(BaseModel):
    """A message as we store it and list it: normalised content parts, an id, a status.

    User/system/developer messages carry `input_text` parts (the SDK's ResponseInputMessageItem); assistant
    messages carry `output_text`/`refusal` parts (its ResponseOutputMessage), for input and output alike.
    """

    id: str
    type: Literal["message"] = "message"
    role: Role
    content: list[InputText | OutputText | Refusal]
    status: ItemStatus = "completed"
    #: An assistant message's phase (the SDK's ResponseOutputMessage.phase): set only by models whose output
    #: separates commentary before a call from the final answer (gpt-oss's harmony channels); absent otherwise.
    phase: Literal["commentary", "final_answer"] | None = Field(default=None, exclude_if=lambda value: value is None)

    @property
    def text(self) -> str:
        """The message's text as the model reads it (refusals included)."""
        return "".join(part.refusal if isinstance(part, Refusal) else part.text for part in self.content)


class StoredFunctionCall(FunctionCallItem):
    id: str
    status: ItemStatus = "completed"


class StoredFunctionCallOutput(FunctionCallOutputItem):
    id: str
    status: ItemStatus = "completed"


class StoredReasoning(ReasoningItem):
    id: str


class StoredCustomToolCall(CustomToolCallItem):
    id: str


class StoredCustomToolCallOutput(CustomToolCallOutputItem):
    id: str


class StoredCompaction(CompactionItem):
    id: str


class StoredConfigurationUpdate(ConfigurationUpdateItem):
    id: str


def _stored_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"item:{kind}"


#: Any item as stored and returned (input_items, output).
Item = Annotated[
    Annotated[MessageItem, Tag("item:message")]
    | Annotated[StoredFunctionCall, Tag("item:function_call")]
    | Annotated[StoredFunctionCallOutput, Tag("item:function_call_output")]
    | Annotated[StoredReasoning, Tag("item:reasoning")]
    | Annotated[StoredCustomToolCall, Tag("item:custom_tool_call")]
    | Annotated[StoredCustomToolCallOutput, Tag("item:custom_tool_call_output")]
    | Annotated[StoredCompaction, Tag("item:compaction")]
    | Annotated[StoredMcpListTools, Tag("item:mcp_list_tools")]
    | Annotated[StoredMcpCall, Tag("item:mcp_call")]
    | Annotated[StoredMcpApprovalRequest, Tag("item:mcp_approval_request")]
    | Annotated[StoredMcpApprovalResponse, Tag("item:mcp_approval_response")]
    | Annotated[StoredConfigurationUpdate, Tag("item:configuration_update")]
    | Annotated[StoredShellCall, Tag("item:shell_call")]
    | Annotated[StoredShellCallOutput, Tag("item:shell_call_output")]
    | Annotated[StoredApplyPatchCall, Tag("item:apply_patch_call")]
    | Annotated[StoredApplyPatchCallOutput, Tag("item:apply_patch_call_output")]
    | Annotated[StoredLocalShellCall, Tag("item:local_shell_call")]
    | Annotated[StoredLocalShellCallOutput, Tag("item:local_shell_call_output")]
    | Annotated[StoredToolSearchCall, Tag("item:tool_search_call")]
    | Annotated[StoredToolSearchOutput, Tag("item:tool_search_output")]
    | Annotated[StoredFileSearchCall, Tag("item:file_search_call")]
    | Annotated[StoredWebSearchCall, Tag("item:web_search_call")],
    Discriminator(_stored_kind),
]


#: Validates a stored item (a dict from the database, or one being built) into its Item model.
STORED_ITEM: TypeAdapter[Item] = TypeAdapter(Item)


class ItemList(BaseModel):
    """One page of items (a response's input items, a conversation's items), with its cursor."""

    object: Literal["list"] = "list"
    data: list[Item]
    first_id: str | None
    last_id: str | None
    has_more: bool


#: What `include` may ask for (the SDK's ResponseIncludable).
Includable = Literal[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
]
LOGPROBS_INCLUDE = "message.output_text.logprobs"
ENCRYPTED_REASONING_INCLUDE = "reasoning.encrypted_content"
