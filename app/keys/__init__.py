"""Projects and their API keys kept in the database: create, list, revoke (CLI and /v1/keys), and the per-node
cache every request's key is checked through."""
