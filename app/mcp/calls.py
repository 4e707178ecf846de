"""What a process that runs jobs needs to call its jobs' MCP servers: the allowed hosts, the bounds, and the
sealer that opens a request's headers (loaded on first use: most jobs call no MCP server)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from app.config import Settings
from app.db.session import Database
from app.mcp import client
from app.mcp.client import DEFAULT_LIST_BOUNDS, ListBounds, ListedTool, McpFailed
from app.mcp.servers import McpServer
from app.outbound.addresses import AllowedHosts
from app.secrets.keys import load_sealer
from app.secrets.sealer import ContentSealer, SealBroken


class McpCaller:
    def __init__(
        self,
        allowed: AllowedHosts,
        *,
        timeout_s: float,
        max_output_bytes: int,
        list_bounds: ListBounds = DEFAULT_LIST_BOUNDS,
        sealer: ContentSealer | None = None,
        settings: Settings | None = None,
        database: Database | None = None,
    ) -> None:
        self.allowed = allowed
        self.timeout_s = timeout_s
        self.max_output_bytes = max_output_bytes
        self.list_bounds = list_bounds
        self._sealer = sealer
        self._settings = settings
        self._database = database
        self._loading = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, database: Database, sealer: ContentSealer | None = None) -> McpCaller:
        return cls(
            AllowedHosts.parse(settings.outbound_allowed_hosts),
            timeout_s=settings.mcp_call_timeout_s,
            max_output_bytes=settings.mcp_max_output_bytes,
            list_bounds=ListBounds(
                max_pages=settings.mcp_max_list_pages,
                max_tools=settings.mcp_max_tools,
                max_bytes=settings.mcp_max_list_bytes,
            ),
            sealer=sealer,
            settings=settings,
            database=database,
        )

    async def _headers(self, server: McpServer, tenant: str) -> dict[str, str]:
        if server.sealed_headers is None:
            return {}
        async with self._loading:
            if self._sealer is None and self._settings is not None and self._database is not None:
                self._sealer = await load_sealer(self._settings, self._database)
        try:
            return server.headers(self._sealer, tenant)
        except SealBroken as error:
            raise McpFailed(f"The MCP server's headers cannot be opened here ({error}).") from None

    async def list_tools(self, server: McpServer, tenant: str) -> list[ListedTool]:
        headers = await self._headers(server, tenant)
        return await client.list_tools(
            server.url, headers, allowed=self.allowed, timeout_s=self.timeout_s, bounds=self.list_bounds
        )

    async def call(self, server: McpServer, tenant: str, name: str, arguments: str) -> str:
        """The tool's output; McpFailed for arguments that are not a JSON object, or a call that fails."""
        try:
            parsed: Any = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise McpFailed(f"The arguments of '{name}' are not a JSON object.")
        headers = await self._headers(server, tenant)
        return await client.call_tool(
            server.url,
            headers,
            name,
            parsed,
            allowed=self.allowed,
            timeout_s=self.timeout_s,
            max_output_bytes=self.max_output_bytes,
        )
