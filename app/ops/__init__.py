"""Operating the server: retention, periodic tasks, health and readiness, `check`, the metrics exposition, and the
operator CLI."""
