"""The calls of client-executed tool types and their outputs (the SDK's shell_call, apply_patch_call,
local_shell_call, tool_search_call and the items answering them): as input (`id` may be left out) and as stored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.schemas.item_ids import ClientId, ItemStatus

CallId = Field(min_length=1)


class ShellAction(BaseModel):
    commands: list[str]
    max_output_length: int | None = None
    timeout_ms: int | None = None


class ShellCallItem(BaseModel):
    """The model's call of a `shell` tool: commands for the client to run."""

    type: Literal["shell_call"] = "shell_call"
    id: ClientId | None = None
    call_id: str = CallId
    action: ShellAction
    status: ItemStatus | None = "completed"


class ShellOutcome(BaseModel):
    type: Literal["exit", "timeout"]
    exit_code: int | None = None


class ShellOutput(BaseModel):
    stdout: str
    stderr: str
    outcome: ShellOutcome


class ShellCallOutputItem(BaseModel):
    """What the client's run of a shell_call's commands printed, one entry a command."""

    type: Literal["shell_call_output"] = "shell_call_output"
    id: ClientId | None = None
    call_id: str = CallId
    output: list[ShellOutput]
    max_output_length: int | None = None
    status: ItemStatus | None = "completed"


class ApplyPatchOperation(BaseModel):
    type: Literal["create_file", "update_file", "delete_file"]
    path: str
    #: The V4A diff (create_file, update_file); delete_file has none.
    diff: str | None = None


class ApplyPatchCallItem(BaseModel):
    """The model's call of an `apply_patch` tool: one file operation for the client to apply."""

    type: Literal["apply_patch_call"] = "apply_patch_call"
    id: ClientId | None = None
    call_id: str = CallId
    operation: ApplyPatchOperation
    status: Literal["in_progress", "completed"] = "completed"


class ApplyPatchCallOutputItem(BaseModel):
    type: Literal["apply_patch_call_output"] = "apply_patch_call_output"
    id: ClientId | None = None
    call_id: str = CallId
    status: Literal["completed", "failed"]
    output: str | None = None


class LocalShellAction(BaseModel):
    type: Literal["exec"] = "exec"
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    timeout_ms: int | None = None
    user: str | None = None
    working_directory: str | None = None


class LocalShellCallItem(BaseModel):
    """The model's call of a `local_shell` tool (the older form of `shell`): one argv to run."""

    type: Literal["local_shell_call"] = "local_shell_call"
    id: ClientId | None = None
    call_id: str = CallId
    action: LocalShellAction
    status: ItemStatus = "completed"


class LocalShellCallOutputItem(BaseModel):
    """NOTE: the SDK gives it no call_id; its `id` is the call's (so it cannot be matched to one here)."""

    type: Literal["local_shell_call_output"] = "local_shell_call_output"
    id: ClientId | None = None
    output: str
    status: ItemStatus | None = None


class ToolSearchCallItem(BaseModel):
    """The model's call of a `tool_search` tool run by the client (`execution: "client"`)."""

    type: Literal["tool_search_call"] = "tool_search_call"
    id: ClientId | None = None
    call_id: str | None = None
    arguments: dict[str, Any]
    execution: Literal["server", "client"] = "client"
    status: ItemStatus = "completed"


class ToolSearchOutputItem(BaseModel):
    """The tools a client's search found (tool definitions as in a request's `tools`)."""

    type: Literal["tool_search_output"] = "tool_search_output"
    id: ClientId | None = None
    call_id: str | None = None
    execution: Literal["server", "client"] = "client"
    status: ItemStatus = "completed"
    tools: list[dict[str, Any]]


class StoredShellCall(ShellCallItem):
    id: str
    status: ItemStatus = "completed"


class StoredShellCallOutput(ShellCallOutputItem):
    id: str
    status: ItemStatus = "completed"


class StoredApplyPatchCall(ApplyPatchCallItem):
    id: str


class StoredApplyPatchCallOutput(ApplyPatchCallOutputItem):
    id: str


class StoredLocalShellCall(LocalShellCallItem):
    id: str


class StoredLocalShellCallOutput(LocalShellCallOutputItem):
    id: str


class StoredToolSearchCall(ToolSearchCallItem):
    id: str


class StoredToolSearchOutput(ToolSearchOutputItem):
    id: str


#: Input models -> the prefix of the ids given to those sent without one.
CLIENT_TOOL_ID_PREFIXES: dict[type[BaseModel], str] = {
    ShellCallItem: "sh",
    ShellCallOutputItem: "sho",
    ApplyPatchCallItem: "apc",
    ApplyPatchCallOutputItem: "apco",
    LocalShellCallItem: "lsh",
    LocalShellCallOutputItem: "lsho",
    ToolSearchCallItem: "tsc",
    ToolSearchOutputItem: "tso",
}
#: Call types matched to their outputs by call_id (local_shell's output has none; tool_search's may lack it).
CLIENT_CALL_TYPES = frozenset({"shell_call", "apply_patch_call", "local_shell_call", "tool_search_call"})
CLIENT_CALL_OUTPUT_TYPES = frozenset({"shell_call_output", "apply_patch_call_output"})
