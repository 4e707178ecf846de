"""Tools on the wire: function tools (alone or grouped in a namespace) and tool_choice."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_.-]{1,64}$"

#: Tool types the hosted API runs itself; a self-hosted server cannot (see app/responses/tools.py).
HOSTED_TOOL_TYPES = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2025_08_26",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "computer",
    }
)
#: The hosted tools this server runs itself when a request (file_search) or its operator (web_search) makes them
#: usable: each offered to the model as a function of this name, its calls made between rounds of the tool loop
#: under a server_label no MCP server can have (labels take no colon), and returned as the SDK's item of its type.
FILE_SEARCH = "file_search"
#: How many results a file_search call returns when its tool gives no max_num_results.
FILE_SEARCH_DEFAULT_MAX_RESULTS = 10
WEB_SEARCH = "web_search"
HOSTED_LABEL_PREFIX = "hosted:"
WEB_SEARCH_TYPES = frozenset(
    {"web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26"}
)


def hosted_label(tool: str) -> str:
    return f"{HOSTED_LABEL_PREFIX}{tool}"


def hosted_tool_of(server_label: str) -> str | None:
    """The hosted tool (file_search, web_search) a call's server_label names; None for an MCP server's."""
    return server_label.removeprefix(HOSTED_LABEL_PREFIX) if server_label.startswith(HOSTED_LABEL_PREFIX) else None


#: Tool types the client runs: offered to the model, their calls returned as the SDK's item of that type. Those
#: forms of them that run on OpenAI's side (a shell in a hosted container, a tool_search without
#: `execution: "client"`) are left out like HOSTED_TOOL_TYPES.
CLIENT_TOOL_TYPES = frozenset({"shell", "local_shell", "apply_patch", "tool_search"})


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamespaceTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["namespace"]
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    tools: list[FunctionTool | CustomTool]


class CustomToolFormat(BaseModel):
    type: Literal["text", "grammar"]
    syntax: Literal["lark", "regex"] | None = None
    definition: str | None = None


class CustomTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["custom"]
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    format: CustomToolFormat | None = None


class McpChoice(BaseModel):
    """tool_choice {type: "mcp", server_label, name?}: a call of that server's tool (any of them without name)."""

    type: Literal["mcp"]
    server_label: str
    name: str | None = None


class FunctionChoice(BaseModel):
    type: Literal["function", "custom"]
    name: str
