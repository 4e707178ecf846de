"""One outbound POST, made safely: the URL checked, its host resolved once and the connection made to that checked
address (the Host header and TLS SNI keep the name, so no DNS rebinding can swap the address), no redirect
followed, no proxy from the environment, the whole exchange within a time limit, and nothing of the answer but its
status read: what a receiver (or whatever listens where a client pointed) says is never shown back."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus

import httpx

from app.outbound.addresses import DEFAULT_PORTS, AllowedHosts, OutboundRefused, check_url, resolve

#: Hosted webhooks give a receiver 10 seconds.
TIMEOUT_S = 10.0


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificates every outbound call verifies against (certifi's, as httpx's default), built once a process
    on first use: a client built with its own takes tens of milliseconds of CPU (hundreds on a loaded machine), and
    a round of deliveries builds one an attempt."""
    return httpx.create_ssl_context(trust_env=False)


class OutboundFailed(Exception):
    """The request was made and got no HTTP answer (connection refused, TLS, timeout); the message says why."""


@dataclass(frozen=True, slots=True)
class OutboundAnswer:
    status_code: int

    @property
    def reason(self) -> str:
        """The status's standard phrase (ours, not the receiver's: its reason phrase is its own text too)."""
        try:
            return HTTPStatus(self.status_code).phrase
        except ValueError:
            return "Unknown status"


async def pin(url: str, allowed: AllowedHosts) -> tuple[str, str, dict[str, str]]:
    """`url` checked and its host resolved once: the URL to the checked address, the Host header that names the
    host, and the TLS server name (the extensions httpx takes). OutboundRefused when the server may not call it."""
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
    return pinned, host_header, extensions


@asynccontextmanager
async def pinned_stream(
    method: str,
    url: str,
    headers: dict[str, str],
    *,
    allowed: AllowedHosts,
    timeout_s: float = TIMEOUT_S,
    content: bytes | None = None,
) -> AsyncIterator[httpx.Response]:
    """One request through the guard (`pin`: no redirect, no proxy, a time limit), its answer open while the
    block runs. OutboundRefused: the server may not call it; OutboundFailed: no answer came."""
    pinned, host_header, extensions = await pin(url, allowed)
    try:
        async with (
            asyncio.timeout(timeout_s),
            httpx.AsyncClient(
                timeout=timeout_s, follow_redirects=False, trust_env=False, verify=tls_context()
            ) as client,
            client.stream(
                method, pinned, content=content, headers={**headers, "host": host_header}, extensions=extensions
            ) as answer,
        ):
            yield answer
    except TimeoutError:
        raise OutboundFailed(f"No answer within {timeout_s:g} s.") from None
    except httpx.HTTPError as error:
        raise OutboundFailed(failure_reason(error)) from None


async def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    allowed: AllowedHosts,
    timeout_s: float = TIMEOUT_S,
) -> OutboundAnswer:
    """POST `body` to `url`. OutboundRefused: the server may not call it; OutboundFailed: no answer came."""
    sent = {**headers, "content-type": "application/json"}
    async with pinned_stream("POST", url, sent, allowed=allowed, timeout_s=timeout_s, content=body) as answer:
        # The body is never read: leaving the block closes the connection.
        return OutboundAnswer(answer.status_code)


def failure_reason(error: httpx.HTTPError) -> str:
    """Why no answer came, in our words: a protocol error's text quotes the bytes the peer sent (a database's
    banner, say), so that it is named by its kind alone; others keep their (local) message, cut short."""
    if isinstance(error, httpx.ProtocolError):
        return f"{type(error).__name__}: the answer was not valid HTTP."
    message = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


__all__ = [
    "AllowedHosts",
    "OutboundAnswer",
    "OutboundFailed",
    "OutboundRefused",
    "pin",
    "pinned_stream",
    "post",
    "tls_context",
]
