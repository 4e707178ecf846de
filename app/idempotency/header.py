"""The Idempotency-Key header of a create, read and bounded (a 400 naming it otherwise), and the hash that tells
whether a later request with the key is the same request: its method, path, query and body."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from app.db.models.requests.idempotency_key import MAX_KEY_CHARS
from app.errors import InvalidRequest

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: On an answer that repeats what the key's first request answered (the payment APIs' name for it).
REPLAYED_HEADER = "Idempotent-Replayed"
#: Printable ASCII, space included: what every client can send in a header and every database compares alike.
_KEY_CHARACTERS = frozenset(chr(code) for code in range(0x20, 0x7F))


def with_key_header(openapi_extra: dict[str, Any]) -> dict[str, Any]:
    """`openapi_extra=` of a create route (its body's, from json_body) with the Idempotency-Key header described."""
    parameter = {
        "name": IDEMPOTENCY_HEADER,
        "in": "header",
        "required": False,
        "description": f"Run this create once: the same key with the same request within its window answers what "
        f"the first request answered (1 to {MAX_KEY_CHARS} printable ASCII characters; a UUID is a good one).",
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS},
    }
    return {**openapi_extra, "parameters": [*openapi_extra.get("parameters", []), parameter]}


@dataclass(frozen=True, slots=True)
class KeyedRequest:
    """A create that sent an Idempotency-Key: the key, and the hash of the request it came with."""

    key: str
    request_hash: str


def invalid_key(message: str) -> InvalidRequest:
    return InvalidRequest(message, param=IDEMPOTENCY_HEADER, code="invalid_idempotency_key")


def key_of(request: Request) -> str | None:
    """The request's Idempotency-Key (None: it sent none); a 400 for one that is empty, too long, not printable
    ASCII, or sent twice."""
    values = request.headers.getlist(IDEMPOTENCY_HEADER)
    if not values:
        return None
    if len(values) > 1:
        raise invalid_key(f"Send one {IDEMPOTENCY_HEADER} header, not {len(values)}.")
    key = values[0]
    if not key or len(key) > MAX_KEY_CHARS:
        raise invalid_key(f"An {IDEMPOTENCY_HEADER} has 1 to {MAX_KEY_CHARS} characters; this one has {len(key)}.")
    if not _KEY_CHARACTERS.issuperset(key):
        raise invalid_key(f"An {IDEMPOTENCY_HEADER} holds printable ASCII characters only (a UUID is a good one).")
    return key


def _start_hash(request: Request, fields: Iterable[bytes]) -> hashlib._Hash:
    """The method, path, query and `fields`, each length-prefixed: no two different requests hash alike by where
    one part ends and the next begins."""
    digest = hashlib.sha256()
    parts = (request.method.encode(), request.url.path.encode(), request.url.query.encode(), *fields)
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest


def _canonical(body: bytes) -> bytes:
    """A JSON body as one text whatever its spacing and key order: two clients (or an SDK and a script) that send
    the same object send the same request. Called after the route parsed the body (its depth checked); a body
    that is not JSON after all is hashed as sent."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def keyed_request(request: Request, body: bytes) -> KeyedRequest | None:
    """A JSON create's key and the hash of its request (its body as a JSON object, not as bytes); None without a
    key."""
    key = key_of(request)
    if key is None:
        return None
    return KeyedRequest(key, _start_hash(request, (_canonical(body),)).hexdigest())


async def keyed_upload(request: Request, fields: Iterable[str], content: AsyncIterator[bytes]) -> KeyedRequest | None:
    """A multipart create's key and hash: its fields and its file's bytes (not the body as sent, whose part
    boundary a client draws afresh for each try); None without a key (and `content` left unread)."""
    key = key_of(request)
    if key is None:
        return None
    digest = _start_hash(request, (field.encode() for field in fields))
    async for chunk in content:
        digest.update(chunk)
    return KeyedRequest(key, digest.hexdigest())
