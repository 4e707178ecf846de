"""The Batch API: a JSONL file of /v1/responses requests run as background responses within a window, the
results as output and error files."""
