"""One outbound GET whose answer is read (a web search backend's results, a page the model opens): the same guard
as every outbound call (client.pin: the URL checked, the address resolved once and pinned, no redirect, no proxy,
a time limit), and the answer read as it arrives up to a byte budget, never whole past it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from app.outbound.addresses import AllowedHosts
from app.outbound.client import TIMEOUT_S, OutboundFailed, failure_reason, pin, tls_context


class AnswerTooLarge(OutboundFailed):
    """The answer ran past its byte budget: it was cut there, and not used."""


@dataclass(frozen=True, slots=True)
class FetchedPage:
    status_code: int
    content_type: str
    body: bytes


async def get(
    url: str,
    *,
    allowed: AllowedHosts,
    max_bytes: int,
    headers: dict[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> FetchedPage:
    """GET `url` (its query included). OutboundRefused: the server may not call it; OutboundFailed: no answer
    came, or (AnswerTooLarge) more than `max_bytes` did."""
    pinned, host_header, extensions = await pin(url, allowed)
    try:
        async with (
            asyncio.timeout(timeout_s),
            httpx.AsyncClient(
                timeout=timeout_s, follow_redirects=False, trust_env=False, verify=tls_context()
            ) as client,
            client.stream(
                "GET", pinned, headers={**(headers or {}), "host": host_header}, extensions=extensions
            ) as answer,
        ):
            body = bytearray()
            async for chunk in answer.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise AnswerTooLarge(f"The answer is larger than {max_bytes} bytes.")
            return FetchedPage(answer.status_code, answer.headers.get("content-type", ""), bytes(body))
    except TimeoutError:
        raise OutboundFailed(f"No answer within {timeout_s:g} s.") from None
    except httpx.HTTPError as error:
        raise OutboundFailed(failure_reason(error)) from None
