"""Metrics, traces and structured logs: what an operator sees of a running server."""
