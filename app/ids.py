"""Opaque, prefixed, unguessable ids: resp_..., msg_..."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"
