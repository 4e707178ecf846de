"""Settings of the calls the server makes for clients: the allow-list, MCP servers, webhook deliveries."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class OutboundSettings(BaseSettings):
    outbound_allowed_hosts: str = Field(
        "",
        description="Non-public hosts webhooks and MCP calls may reach: names, IPs, CIDRs with their ports "
        "('hooks.internal:443,10.1.0.0/16,127.0.0.1:9000,[::1]:*'). A bare host allows every port but never this "
        "machine's (a bare loopback entry stops the start-up); other private or reserved addresses are refused.",
    )
    mcp_call_timeout_s: float = Field(
        30.0,
        gt=0,
        description="How long one call to a client's MCP server (listing its tools, or one tool call) may take; a "
        "server that takes longer fails that listing or that call, not the response's worker.",
    )
    mcp_max_output_bytes: int = Field(
        65536,
        ge=1,
        description="The most an MCP tool call may return (its output as text, in UTF-8 bytes); a longer output fails "
        "that call. Its answer is cut as it arrives at 6 times this plus 64 KiB, never read whole.",
    )
    mcp_max_list_pages: int = Field(32, ge=1, description="Pages of an MCP tool list read; past them, it fails.")
    mcp_max_tools: int = Field(256, ge=1, description="Tools an MCP server may list; past them, its listing fails.")
    mcp_max_list_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Bytes an MCP tool listing may send, counted as they arrive."
    )
    mcp_max_calls: int = Field(
        16,
        ge=1,
        description="How many MCP tool calls one response makes at most when its request sets no max_tool_calls (a "
        "model that keeps calling ends its response there).",
    )
    webhook_retry_window_s: float = Field(
        72 * 3600,
        gt=0,
        description="How long a webhook delivery is retried (exponential backoff with jitter) before it is given up; "
        "an endpoint whose deliveries have failed without a success for this long is disabled.",
    )
    webhook_secret_grace_s: float = Field(
        24 * 3600,
        ge=0,
        description="After a rotation asked to keep the old secret active (keep_old_secret_active_for_24_hours), how "
        "long deliveries carry a signature with the old secret beside the new one.",
    )
    webhook_delivery_interval_s: float = Field(
        1.0,
        gt=0,
        description="How often each API node and worker looks for webhook deliveries that are due.",
    )
    webhook_timeout_s: float = Field(
        10.0,
        gt=0,
        le=60,
        description="How long a webhook delivery attempt waits for the receiver's answer (10 s, as hosted) before it "
        "counts as failed; a process that dies mid-attempt leaves the delivery to another one after 6 times this.",
    )
    webhook_max_in_flight: int = Field(128, ge=1, description="Webhook attempts one process has in flight at once.")
    webhook_max_in_flight_per_tenant: int = Field(
        16, ge=1, description="Of those, one tenant's at most: its hanging receivers delay no other tenant."
    )
    webhook_max_in_flight_per_endpoint: int = Field(4, ge=1, description="Of those, one endpoint's at most.")
    webhook_max_endpoints_per_tenant: int = Field(
        20, ge=0, description="Webhook endpoints a project may have (a 400 past them). 0: no cap."
    )
    webhook_tests_per_tenant: int = Field(
        2, ge=0, description="Endpoint tests a tenant may have waiting at once on a node (a 429 past). 0: no limit."
    )
