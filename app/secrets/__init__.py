"""Secrets: sealing what clients carry but may not read (compaction items), and where the sealing keys come from."""
