"""A request's `mcp` tools at create: each server checked (a 400 naming the field), its tools listed (an
`mcp_list_tools` item that leads the response), or reused from the chain's last listing of the same
server_label, filtered by allowed_tools and offered to the model as functions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.errors import InvalidRequest
from app.generation.prompt import Turn
from app.generation.tool_calls import FunctionSpec
from app.ids import new_id
from app.mcp.approvals import ApprovedCall
from app.mcp.calls import McpCaller
from app.mcp.client import ListedTool, McpFailed
from app.mcp.servers import McpServer, function_of, parse_request_servers, usable
from app.runtime import Runtime
from app.schemas.items import McpListedTool, StoredMcpListTools


@dataclass(slots=True)
class McpContext:
    servers: list[McpServer] = field(default_factory=list)
    #: The tools offered to the model, as (server_label, function).
    offered: list[tuple[str, FunctionSpec]] = field(default_factory=list)
    #: The listings made for this response (mcp_list_tools items): they lead its output.
    items: list[dict[str, Any]] = field(default_factory=list)
    #: Why a listing failed (the response fails with it), None when every server was listed.
    failure: str | None = None
    #: The offered functions whose calls need the client's approval (require_approval).
    approvals: set[str] = field(default_factory=set)
    #: The calls the client approved in this request's input: made before the model's first round.
    approved: list[ApprovedCall] = field(default_factory=list)

    def take_approved(self, approved: list[ApprovedCall]) -> None:
        """The approved calls this response makes: each of a tool still offered (a 400 naming the approval)."""
        for call in approved:
            if not any(label == call.server_label and spec.name == call.name for label, spec in self.offered):
                raise InvalidRequest(
                    f"The approved call of '{call.name}' needs the mcp tool with server_label "
                    f"'{call.server_label}' in this request's tools, offering that tool.",
                    param=call.param,
                    code="invalid_value",
                )
        self.approved = approved


def parse_servers(tools: list[dict[str, Any]] | None, tenant: str, runtime: Runtime) -> list[McpServer]:
    """The request's `mcp` tools, checked, headers sealed: no network yet."""
    return parse_request_servers(
        tools or [], allowed_hosts=runtime.settings.outbound_allowed_hosts, sealer=runtime.sealer, tenant=tenant
    )


def _listed_before(history: Sequence[Turn]) -> dict[str, list[ListedTool]]:
    """The latest successful listing of each server_label in the chain (hosted lists once per chain); a listing
    resent as input (a stateless history) counts too."""
    listed: dict[str, list[ListedTool]] = {}
    for turn in history:
        for item in (*turn.input_items, *turn.output_items):
            if item.get("type") == "mcp_list_tools" and not item.get("error"):
                listed[item["server_label"]] = [
                    ListedTool(
                        tool["name"], tool.get("description"), tool.get("input_schema") or {}, tool.get("annotations")
                    )
                    for tool in item.get("tools", [])
                ]
    return listed


async def gather_mcp(servers: list[McpServer], tenant: str, runtime: Runtime, history: Sequence[Turn]) -> McpContext:
    """List what the chain has not listed yet (all servers at once), and offer their allowed tools."""
    context = McpContext(servers=servers)
    if not servers:
        return context
    caller = McpCaller.from_settings(runtime.settings, runtime.database, runtime.sealer)
    before = _listed_before(history)
    fresh = [server for server in servers if server.label not in before]
    results = await asyncio.gather(*(caller.list_tools(server, tenant) for server in fresh), return_exceptions=True)
    listed = dict(before)
    for server, result in zip(fresh, results, strict=True):
        item = StoredMcpListTools(id=new_id("mcpl"), server_label=server.label, tools=[])
        if isinstance(result, McpFailed):
            item.error = str(result)
            context.failure = context.failure or f"{result} (server_label '{server.label}')"
        elif isinstance(result, BaseException):
            raise result
        else:
            listed[server.label] = result
            item.tools = [
                McpListedTool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=tool.input_schema,
                    annotations=tool.annotations,
                )
                for tool in result
                if server.keeps(tool)
            ]
        context.items.append(item.model_dump(mode="json"))
    for server in servers:
        for tool in listed.get(server.label, []):
            if server.keeps(tool) and usable(tool):
                context.offered.append((server.label, function_of(tool)))
                if server.needs_approval(tool):
                    context.approvals.add(tool.name)
    return context
