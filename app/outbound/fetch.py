"""One outbound GET whose answer is read (a web search backend's results, a page the model opens): the same guard
as every outbound call (client.pinned_stream: the URL checked, the address resolved once and pinned, no redirect,
no proxy, a time limit), and the answer read as it arrives up to a byte budget, never whole past it."""

from __future__ import annotations

from dataclasses import dataclass

from app.outbound.addresses import AllowedHosts
from app.outbound.client import TIMEOUT_S, OutboundFailed, pinned_stream


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
    async with pinned_stream("GET", url, headers or {}, allowed=allowed, timeout_s=timeout_s) as answer:
        body = bytearray()
        async for chunk in answer.aiter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise AnswerTooLarge(f"The answer is larger than {max_bytes} bytes.")
        return FetchedPage(answer.status_code, answer.headers.get("content-type", ""), bytes(body))
