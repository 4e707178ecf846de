"""The `mcp` tools of a request: checked (a 400 naming the field), their secrets sealed, their listed tools
filtered and offered to the model as functions, and how a job carries them (`McpSetup`, plain JSON)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import InvalidRequest, validation_error
from app.generation.tool_calls import FunctionSpec
from app.mcp.client import ListedTool
from app.outbound.addresses import AllowedHosts, OutboundRefused, check_url
from app.secrets.sealer import ContentSealer

#: The sealer's purpose for a request's MCP headers: a token opens only as these, for its tenant.
HEADERS_PURPOSE = "mcp-headers"
LABEL_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")


class McpToolFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool_names: list[str] | None = None
    read_only: bool | None = None


class McpApprovalFilter(BaseModel):
    model_config = ConfigDict(extra="allow")
    always: dict[str, Any] | None = None
    never: dict[str, Any] | None = None


class McpTool(BaseModel):
    """The SDK's `Mcp` tool (openai/types/responses/tool.py)."""

    model_config = ConfigDict(extra="allow")
    type: str
    server_label: str = Field(pattern=LABEL_PATTERN)
    server_url: str | None = Field(None, max_length=2048)
    connector_id: str | None = None
    headers: dict[str, str] | None = None
    authorization: str | None = None
    allowed_tools: list[str] | McpToolFilter | None = None
    require_approval: str | McpApprovalFilter | None = None
    server_description: str | None = None


@dataclass(frozen=True, slots=True)
class McpServer:
    label: str
    url: str
    #: Its headers (and `authorization`, as a bearer token) sealed for the request's tenant; None: none sent.
    sealed_headers: str | None
    #: Only these tool names (None: all); `read_only`: only the tools the server marks read-only.
    tool_names: list[str] | None = None
    read_only: bool = False

    def headers(self, sealer: ContentSealer | None, tenant: str) -> dict[str, str]:
        if self.sealed_headers is None:
            return {}
        if sealer is None:
            raise RuntimeError("this process has no sealer to open MCP headers with")
        opened = sealer.open(self.sealed_headers, purpose=HEADERS_PURPOSE, tenant=tenant)
        return {str(name): str(value) for name, value in opened.items()}

    def keeps(self, tool: ListedTool) -> bool:
        """allowed_tools: whether the model may see (and call) this tool."""
        if self.tool_names is not None and tool.name not in self.tool_names:
            return False
        return not self.read_only or bool((tool.annotations or {}).get("readOnlyHint"))


def parse_server(
    tool: dict[str, Any], param: str, *, allowed: AllowedHosts, sealer: ContentSealer, tenant: str
) -> McpServer:
    """One `mcp` tool of a request, checked; a 400 naming its field otherwise."""
    try:
        parsed = McpTool.model_validate(tool)
    except ValidationError as error:
        problem = validation_error(list(error.errors()))
        problem.param = f"{param}.{problem.param}" if problem.param else param
        raise problem from None
    if parsed.connector_id is not None:
        raise InvalidRequest(
            "Connectors (connector_id) are OpenAI's; give the server_url of an MCP server instead.",
            param=f"{param}.connector_id",
            code="unsupported_parameter",
        )
    if parsed.server_url is None:
        raise InvalidRequest(
            "An mcp tool needs a 'server_url'.", param=f"{param}.server_url", code="missing_required_parameter"
        )
    try:
        check_url(parsed.server_url, allowed)
    except OutboundRefused as refused:
        raise InvalidRequest(
            f"Invalid 'server_url': {refused}", param=f"{param}.server_url", code="invalid_url"
        ) from None
    # NOTE: approvals (mcp_approval_request / mcp_approval_response) are not built yet: a request must not expect
    # them. No require_approval is taken as "never" (the hosted default is approvals on).
    if parsed.require_approval is not None and parsed.require_approval != "never":
        raise InvalidRequest(
            "require_approval other than 'never' is not supported by this server yet: MCP tools are called without "
            "approval.",
            param=f"{param}.require_approval",
            code="unsupported_parameter",
        )
    headers = dict(parsed.headers or {})
    if parsed.authorization:
        headers["Authorization"] = f"Bearer {parsed.authorization}"
    sealed = sealer.seal(headers, purpose=HEADERS_PURPOSE, tenant=tenant) if headers else None
    names: list[str] | None = None
    read_only = False
    if isinstance(parsed.allowed_tools, list):
        names = parsed.allowed_tools
    elif isinstance(parsed.allowed_tools, McpToolFilter):
        names = parsed.allowed_tools.tool_names
        read_only = bool(parsed.allowed_tools.read_only)
    return McpServer(parsed.server_label, parsed.server_url, sealed, names, read_only)


def parse_request_servers(
    tools: list[dict[str, Any]], *, allowed_hosts: str, sealer: ContentSealer, tenant: str
) -> list[McpServer]:
    """Every `mcp` tool of a request's `tools`, checked (each server_label once)."""
    allowed = AllowedHosts.parse(allowed_hosts)
    servers: list[McpServer] = []
    for index, tool in enumerate(tools):
        if tool.get("type") != "mcp":
            continue
        server = parse_server(tool, f"tools[{index}]", allowed=allowed, sealer=sealer, tenant=tenant)
        if any(known.label == server.label for known in servers):
            raise InvalidRequest(
                f"Duplicate server_label '{server.label}': each mcp tool needs its own.",
                param=f"tools[{index}].server_label",
                code="invalid_value",
            )
        servers.append(server)
    return servers


def redacted(tool: dict[str, Any]) -> dict[str, Any]:
    """An `mcp` tool as a Response echoes (and stores) it: its headers' and authorization's values never."""
    echoed = dict(tool)
    if isinstance(echoed.get("headers"), dict):
        echoed["headers"] = {name: "<redacted>" for name in echoed["headers"]}
    if echoed.get("authorization") is not None:
        echoed["authorization"] = "<redacted>"
    return echoed


def function_of(tool: ListedTool) -> FunctionSpec:
    schema = tool.input_schema if tool.input_schema.get("type") == "object" else {"type": "object", "properties": {}}
    return FunctionSpec(tool.name, tool.description, schema)


def usable(tool: ListedTool) -> bool:
    """A name the model can call (our call markup and the SDK's item names take these)."""
    return bool(_TOOL_NAME.match(tool.name))


@dataclass(slots=True)
class McpSetup:
    """What a job needs of its request's MCP tools: the servers, which offered function is whose, and the
    continuation text around a tool result (see app/jobs/tool_loop.py). Plain JSON in a job's payload."""

    servers: list[McpServer] = field(default_factory=list)
    #: Offered function name -> the server_label of the server that has it.
    tools: dict[str, str] = field(default_factory=dict)
    #: A listing failed: the response fails with this message after its mcp_list_tools items.
    failure: str | None = None
    #: The chat template's text between the model's call and a tool result, and after the result (the next
    #: assistant turn's opening): how a tool round continues the prompt.
    after_call: str = ""
    before_answer: str = ""
    #: The grammar of the rounds after a call (the text format's, if any): a forced call is forced once.
    answer_grammar: str | None = None
    #: The most calls this response makes (max_tool_calls, else the deployment's cap).
    max_calls: int = 16

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> McpSetup:
        return cls(**{**payload, "servers": [McpServer(**server) for server in payload.get("servers", [])]})

    def server(self, label: str) -> McpServer:
        return next(server for server in self.servers if server.label == label)
