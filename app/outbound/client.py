"""One outbound POST, made safely: the URL checked, its host resolved once and the connection made to that checked
address (the Host header and TLS SNI keep the name, so no DNS rebinding can swap the address), no redirect
followed, no proxy from the environment, the whole exchange within a time limit, at most a short excerpt of the
answer read."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass

import httpx

from app.outbound.addresses import DEFAULT_PORTS, AllowedHosts, OutboundRefused, check_url, resolve

#: Hosted webhooks give a receiver 10 seconds.
TIMEOUT_S = 10.0
#: What is kept of a receiver's answer (for the deliveries list), in bytes.
EXCERPT_BYTES = 256


class OutboundFailed(Exception):
    """The request was made and got no HTTP answer (connection refused, TLS, timeout); the message says why."""


@dataclass(frozen=True, slots=True)
class OutboundAnswer:
    status_code: int
    #: The first EXCERPT_BYTES bytes of the answer's body, decoded leniently.
    excerpt: str


async def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    allowed: AllowedHosts,
    timeout_s: float = TIMEOUT_S,
    excerpt_bytes: int = EXCERPT_BYTES,
) -> OutboundAnswer:
    """POST `body` to `url`. OutboundRefused: the server may not call it; OutboundFailed: no answer came."""
    target = check_url(url, allowed)
    address = await resolve(target, allowed)
    scheme = target.url.scheme
    host_literal = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    path = target.url.path or "/"
    query = f"?{target.url.query}" if target.url.query else ""
    pinned = f"{scheme}://{host_literal}:{target.port}{path}{query}"
    named_host = f"[{target.host}]" if ":" in target.host else target.host
    host_header = named_host if target.port == DEFAULT_PORTS[scheme] else f"{named_host}:{target.port}"
    extensions = {"sni_hostname": target.host} if scheme == "https" else {}
    try:
        async with (
            asyncio.timeout(timeout_s),
            httpx.AsyncClient(timeout=timeout_s, follow_redirects=False, trust_env=False) as client,
            client.stream(
                "POST",
                pinned,
                content=body,
                headers={**headers, "host": host_header, "content-type": "application/json"},
                extensions=extensions,
            ) as answer,
        ):
            excerpt = bytearray()
            async for chunk in answer.aiter_raw():
                excerpt.extend(chunk[: excerpt_bytes - len(excerpt)])
                if len(excerpt) >= excerpt_bytes:
                    break
            return OutboundAnswer(answer.status_code, excerpt.decode("utf-8", "replace"))
    except TimeoutError:
        raise OutboundFailed(f"No answer within {timeout_s:g} s.") from None
    except httpx.HTTPError as error:
        raise OutboundFailed(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__) from None


__all__ = ["AllowedHosts", "OutboundAnswer", "OutboundFailed", "OutboundRefused", "post"]
