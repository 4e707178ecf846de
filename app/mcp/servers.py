"""The `mcp` tools of a request: checked (a 400 naming the field), their secrets sealed, their listed tools
filtered and offered to the model as functions, and how a job carries them (`McpSetup`, plain JSON)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import InvalidRequest, validation_error
from app.generation.tool_calls import FunctionSpec
from app.mcp.client import ListedTool
from app.outbound.addresses import AllowedHosts, OutboundRefused, check_url
from app.secrets.sealer import ContentSealer

#: The sealer's purpose for a request's MCP headers: a token opens only as these, for its tenant.
HEADERS_PURPOSE = "mcp-headers"
LABEL_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
APPROVAL_MODES = ("always", "never")
Model = TypeVar("Model", bound=BaseModel)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")


class McpToolFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool_names: list[str] | None = None
    read_only: bool | None = None


class McpApprovalFilter(BaseModel):
    """The SDK's McpToolApprovalFilter: the tools that always, or never, need the client's approval."""

    model_config = ConfigDict(extra="forbid")
    always: McpToolFilter | None = None
    never: McpToolFilter | None = None


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
    #: "always", "never" or an McpApprovalFilter: checked apart (_approval), for a 400 that names the field.
    require_approval: Any = None
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
    #: require_approval: "always", "never", or the filter as JSON ({always?: {tool_names?, read_only?}, never?}).
    approval: str | dict[str, Any] = "always"

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
        return not self.read_only or _read_only(tool)

    def needs_approval(self, tool: ListedTool) -> bool:
        """require_approval: whether a call of `tool` waits for the client's mcp_approval_response."""
        if isinstance(self.approval, str):
            return self.approval != "never"
        always, never = self.approval.get("always"), self.approval.get("never")
        if _matches(always, tool):
            return True
        if _matches(never, tool):
            return False
        # NOTE: a tool neither filter names needs approval (the hosted default), unless the filter names only
        # the tools that always do: then those are the only ones.
        return never is not None or always is None


def _read_only(tool: ListedTool) -> bool:
    return bool((tool.annotations or {}).get("readOnlyHint"))


def _matches(tool_filter: dict[str, Any] | None, tool: ListedTool) -> bool:
    """A filter ({tool_names?, read_only?}) names `tool` when every criterion it gives holds; one with none, never."""
    if not tool_filter or (tool_filter.get("tool_names") is None and tool_filter.get("read_only") is None):
        return False
    names = tool_filter.get("tool_names")
    read_only = tool_filter.get("read_only")
    return (names is None or tool.name in names) and (read_only is None or read_only == _read_only(tool))


def parse_server(
    tool: dict[str, Any], param: str, *, allowed: AllowedHosts, sealer: ContentSealer, tenant: str
) -> McpServer:
    """One `mcp` tool of a request, checked; a 400 naming its field otherwise."""
    parsed = _checked(McpTool, tool, param)
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
    approval = _approval(parsed.require_approval, f"{param}.require_approval")
    return McpServer(parsed.server_label, parsed.server_url, sealed, names, read_only, approval)


def _checked(model: type[Model], value: Any, param: str) -> Model:
    try:
        return model.model_validate(value)
    except ValidationError as error:
        problem = validation_error(list(error.errors()))
        problem.param = f"{param}.{problem.param}" if problem.param else param
        raise problem from None


def _approval(value: Any, param: str) -> str | dict[str, Any]:
    """require_approval as McpServer keeps it. As the hosted API: none given, every call waits for approval."""
    if value is None:
        return "always"
    if isinstance(value, str):
        if value not in APPROVAL_MODES:
            raise InvalidRequest(
                f"Invalid value for '{param}': expected 'always', 'never' or a filter object, got '{value}'.",
                param=param,
                code="invalid_value",
            )
        return value
    return _checked(McpApprovalFilter, value, param).model_dump(exclude_none=True)


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
    """What a job needs of its request's MCP tools: the servers, which offered function is whose, and what its
    prompt was rendered from, for the tool rounds' prompts (see app/jobs/tool_loop.py). Plain JSON in a job's
    payload."""

    servers: list[McpServer] = field(default_factory=list)
    #: Offered function name -> the server_label of the server that has it.
    tools: dict[str, str] = field(default_factory=dict)
    #: The offered functions whose calls wait for the client's approval (an mcp_approval_request ends the response).
    approvals: list[str] = field(default_factory=list)
    #: Calls the client approved (app/mcp/approvals.py's ApprovedCall, as JSON): made before the model's first round.
    approved: list[dict[str, str]] = field(default_factory=list)
    #: A listing failed: the response fails with this message after its mcp_list_tools items.
    failure: str | None = None
    #: What the prompt was rendered from (app/generation/prompt.py's PromptContext, as JSON): a tool round's
    #: prompt is it with the round's calls and results after it, rendered again by the model's template.
    prompt: dict[str, Any] = field(default_factory=dict)
    #: The grammar of the rounds after a call (the text format's, if any): a forced call is forced once.
    answer_grammar: str | None = None
    #: The most calls this response makes (max_tool_calls, else the deployment's cap).
    max_calls: int = 16
    #: The request's hosted tools (file_search, web_search) the loop runs too: tool -> its configuration (JSON, as
    #: app/hosted_tools/setup.py checked it); their functions are in `tools` under their `hosted:` labels.
    hosted: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> McpSetup:
        # NOTE: a job queued by an older server carries fields since dropped (the continuation markup).
        known = {name: value for name, value in payload.items() if name in cls.__dataclass_fields__}
        return cls(**{**known, "servers": [McpServer(**server) for server in payload.get("servers", [])]})

    def server(self, label: str) -> McpServer:
        return next(server for server in self.servers if server.label == label)
