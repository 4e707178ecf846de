"""What tests and benchmarks share, shipped in the package (as httpx ships MockTransport): a fake model, real server
processes, fresh databases, SSE parsing, and a cluster for fault tests. The server never imports it."""
