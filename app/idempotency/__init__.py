"""Idempotent creates: the Idempotency-Key header read and bounded, a request's hash, the key claimed for one
request at a time, and what its first request answered kept (or the response it created) for a replay."""
