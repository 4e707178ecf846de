"""Who a caller is: the tenant its API key stands for (HTTP and WebSocket alike, and the operator CLI's
`--api-key`), checked in constant time; one tenant on an open server."""

from __future__ import annotations

import hashlib
import hmac

from app.config import Settings
from app.errors import Unauthorized

OPEN_TENANT = "public"


def tenant_for(authorization: str, settings: Settings) -> str:
    """The caller's tenant from its Authorization header: one per API key (a hash, never the key itself); one
    tenant on an open server."""
    if not settings.api_keys:
        return OPEN_TENANT
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key:
        raise Unauthorized(
            "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.",
            code="missing_api_key",
        )
    sent = _key_bytes(key.strip())
    if not any(hmac.compare_digest(sent, known.encode()) for known in settings.api_keys):
        raise Unauthorized("Incorrect API key provided.", code="invalid_api_key")
    return tenant_of_key(sent)


def tenant_of_key(key: bytes) -> str:
    """The tenant an API key stands for (a hash: the key itself is never stored)."""
    return "key:" + hashlib.sha256(key).hexdigest()[:32]


def _key_bytes(key: str) -> bytes:
    """The key as the client sent it: HTTP headers arrive decoded as Latin-1, so encoding them back gives the raw
    (UTF-8) bytes; compare_digest takes str only when it is ASCII, hence bytes."""
    try:
        return key.encode("latin-1")
    except UnicodeEncodeError:  # not from an HTTP header (a test, say): already the text itself
        return key.encode("utf-8", "surrogatepass")
