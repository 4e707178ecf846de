"""Outbound HTTP on a client's behalf (webhook deliveries; the MCP tool later): only to public addresses unless
allowed, to the very address that was checked, without redirects, with a bounded time and a bounded answer."""
