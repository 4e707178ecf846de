"""The Responses API's bounds on `metadata`, shared by responses and conversations: the one check of every
metadata key and value before it is stored."""

from __future__ import annotations

METADATA_MAX_PAIRS = 16
METADATA_MAX_KEY_CHARS = 64
METADATA_MAX_VALUE_CHARS = 512
NUL = "\x00"


def check_metadata(value: dict[str, str] | None) -> dict[str, str] | None:
    """`value` as it is, or a ValueError naming the bound it passes (a pydantic field validator's check)."""
    if value is None:
        return value
    if len(value) > METADATA_MAX_PAIRS:
        raise ValueError(f"at most {METADATA_MAX_PAIRS} key-value pairs are allowed, got {len(value)}")
    for key, item in value.items():
        # Postgres cannot read a NUL back out of JSON (`->>` fails): one stored NUL would make every
        # metadata-filtered list of its tenant a 500.
        if NUL in key or NUL in item:
            raise ValueError(f"keys and values may not contain the NUL character (\\u0000) (key {key[:16]!r})")
        if len(key) > METADATA_MAX_KEY_CHARS:
            raise ValueError(f"keys may be at most {METADATA_MAX_KEY_CHARS} characters ({key[:16]!r}...)")
        if len(item) > METADATA_MAX_VALUE_CHARS:
            raise ValueError(f"values may be at most {METADATA_MAX_VALUE_CHARS} characters (key {key!r})")
    return value
