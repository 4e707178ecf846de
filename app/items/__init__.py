"""Stored items, shared by responses and conversations: a request's input normalised, item_reference resolved, include,
compaction items sealed and opened, items found by id, and pages of item lists."""
