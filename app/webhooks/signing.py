"""Signing secrets and Standard Webhooks signatures, exactly as the openai SDK's `client.webhooks.unwrap()` checks
them (openai/lib/_webhooks.py): the key is the base64 text after `whsec_`, decoded; the signature is
`v1,` + base64(HMAC-SHA256(key, f"{webhook_id}.{timestamp}.{body}")), several separated by spaces."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
#: Characters of the secret a hint shows.
HINT_CHARS = 4


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(os.urandom(SECRET_BYTES)).decode()


def secret_hint(secret: str) -> str:
    """Enough to tell two secrets apart, nothing to sign with."""
    return f"{SECRET_PREFIX}...{secret[-HINT_CHARS:]}"


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX)) if secret.startswith(SECRET_PREFIX) else secret.encode()


def signature(secret: str, webhook_id: str, timestamp: int, body: str) -> str:
    signed = f"{webhook_id}.{timestamp}.{body}".encode()
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()


def signed_headers(secrets: Sequence[str], webhook_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with each secret (the new one first during a rotation)."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(secret, webhook_id, timestamp, body) for secret in secrets),
    }
