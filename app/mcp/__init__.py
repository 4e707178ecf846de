"""The `mcp` tool, client side: remote MCP servers a request names, checked, listed and called (safely)."""
