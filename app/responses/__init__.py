"""The API side of a response: endpoints, request parsing, the context (history, item references, compaction), prepare,
submit, relay, reads and lists, cancel; its repository and schemas."""
