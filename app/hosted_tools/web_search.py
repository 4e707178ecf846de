"""The web_search tool's call, through the backend its operator configured: a SearXNG-compatible JSON endpoint
(through the outbound guard, as every call the server makes for a client), or the offline index (a vector store
of pages, each file with a `url` attribute, searched as file_search searches a store). Its action is a search, a
page opened, or a pattern found in a page; `filters.allowed_domains` holds for all three."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from app.config import Settings
from app.events.hosted_calls import WebResult, action_of, web_search_output
from app.generation.embeddings.base import EmbeddingUnavailable
from app.hosted_tools.failures import HostedCallFailed
from app.outbound.addresses import AllowedHosts, OutboundRefused
from app.outbound.client import OutboundFailed
from app.outbound.fetch import get
from app.retrieval.extraction import ExtractionError, extract_text
from app.retrieval.filters import parse_filter
from app.retrieval.search import Searcher, SearchRequest, StoreExpired, StoreNotFound, search
from app.schemas.hosted_items import WebSearchAction

#: A found pattern is shown with this many characters around it, at most this many times.
FIND_CONTEXT_CHARS = 200
FIND_MAX_MATCHES = 5


@dataclass(frozen=True, slots=True)
class WebBackend:
    """What a web_search needs, in whatever process runs it."""

    settings: Settings
    allowed: AllowedHosts
    searcher: Searcher


def in_domains(url: str, domains: list[str]) -> bool:
    """`url`'s host is one of `domains` or under one (none given: every host is)."""
    if not domains:
        return True
    host = (urlsplit(url).hostname or "").lower().removeprefix("www.")
    return any(host == domain or host.endswith(f".{domain}") for domain in domains)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


async def _fetch(backend: WebBackend, url: str) -> bytes:
    settings = backend.settings
    try:
        page = await get(
            url,
            allowed=backend.allowed,
            max_bytes=settings.web_search_max_bytes,
            headers={"accept": "application/json, text/html;q=0.9, */*;q=0.5"},
            timeout_s=settings.web_search_timeout_s,
        )
    except OutboundRefused as refused:
        raise HostedCallFailed(f"The server may not reach {url}: {refused}") from None
    except OutboundFailed as error:
        raise HostedCallFailed(f"The web search backend gave no answer: {error}") from None
    if page.status_code != 200:
        raise HostedCallFailed(f"The web search backend answered HTTP {page.status_code}.")
    return page.body


async def _searxng(backend: WebBackend, query: str, config: dict[str, Any]) -> list[WebResult]:
    # NOTE: SearXNG takes no location; user_location's country is passed as its `language` region only where the
    # client named one (its results then lean to that country's pages), city and timezone are not used.
    params = {"q": query, "format": "json"}
    country = (config.get("user_location") or {}).get("country")
    if isinstance(country, str) and re.fullmatch(r"[A-Za-z]{2}", country):
        params["language"] = f"all-{country.upper()}"
    base = backend.settings.web_search_searxng_url
    body = await _fetch(backend, f"{base}{'&' if '?' in base else '?'}{urlencode(params)}")
    try:
        answer = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HostedCallFailed("The web search backend's answer is not JSON.") from None
    found = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(found, list):
        raise HostedCallFailed("The web search backend's answer has no results list.")
    results = []
    for entry in found:
        if not isinstance(entry, dict):
            continue
        url, title, content = entry.get("url"), entry.get("title"), entry.get("content")
        if isinstance(url, str) and url.startswith(("http:", "https:")):
            results.append(
                WebResult(url, title if isinstance(title, str) else url, content if isinstance(content, str) else "")
            )
    return results


async def _offline(backend: WebBackend, query: str, config: dict[str, Any], url: str | None = None) -> list[WebResult]:
    """The offline index's pages for `query` (within the page at `url`, when given), best first, each page once."""
    settings = backend.settings
    filters = parse_filter({"type": "eq", "key": "url", "value": url}) if url else None
    request = SearchRequest(queries=[query], filters=filters, max_num_results=min(config["max_results"] * 4, 50))
    try:
        found = await search(
            backend.searcher, settings.web_search_offline_tenant, [settings.web_search_offline_store_id], request
        )
    except (StoreNotFound, StoreExpired):
        raise HostedCallFailed("The offline web index cannot be searched (its vector store is gone).") from None
    except EmbeddingUnavailable as error:
        raise HostedCallFailed(f"The offline web index's embedding model cannot be reached: {error}.") from None
    pages: dict[str, WebResult] = {}
    for hit in found.hits:
        attributes = hit.attributes or {}
        page_url = attributes.get("url")
        if not isinstance(page_url, str) or page_url in pages:
            continue
        title = attributes.get("title")
        pages[page_url] = WebResult(page_url, title if isinstance(title, str) else hit.filename, hit.text)
    return list(pages.values())


def _find(text: str, pattern: str) -> str:
    """The passages of `text` around each place `pattern` occurs (case-insensitive)."""
    found = [match.start() for match in re.finditer(re.escape(pattern), text, flags=re.IGNORECASE)]
    passages = [
        text[max(start - FIND_CONTEXT_CHARS, 0) : start + len(pattern) + FIND_CONTEXT_CHARS]
        for start in found[:FIND_MAX_MATCHES]
    ]
    return "\n…\n".join(passages) if passages else f"'{pattern}' does not occur in this page."


async def _open(backend: WebBackend, action: WebSearchAction, config: dict[str, Any]) -> list[WebResult]:
    """open_page / find_in_page: the page's text (through the backend that found it)."""
    url = action.url or ""
    if config["backend"] == "offline":
        query = action.pattern or " ".join(re.findall(r"[^\W_]+", urlsplit(url).path)) or url
        pages = await _offline(backend, query, config, url)
        text = "\n".join(page.text for page in pages)
        title = pages[0].title if pages else url
    else:
        body = await _fetch(backend, url)
        name = "page.html" if b"<html" in body[:2048].lower() or b"<!doctype" in body[:2048].lower() else "page.txt"
        try:
            text = extract_text(name, body)
        except ExtractionError as error:
            raise HostedCallFailed(f"The page cannot be read: {error}") from None
        title = url
    if not text:
        raise HostedCallFailed(f"No page at {url} in the web index.")
    shown = _find(text, action.pattern) if action.pattern else text
    return [WebResult(url, title, shown)]


async def run_web_search(backend: WebBackend, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    """The call's output (events/hosted_calls.py's payload); HostedCallFailed says why there is none."""
    action = action_of(arguments)
    domains = config["allowed_domains"]
    if action.type != "search":
        if not in_domains(action.url or "", domains):
            raise HostedCallFailed(f"{action.url} is not within the allowed domains ({', '.join(domains)}).")
        results = await _open(backend, action, config)
    elif not (action.query or "").strip():
        raise HostedCallFailed("The web_search call gives no query.")
    elif config["backend"] == "offline":
        results = await _offline(backend, action.query or "", config)
    else:
        results = await _searxng(backend, action.query or "", config)
    kept = [result for result in results if in_domains(result.url, domains)][: config["max_results"]]
    shown = [WebResult(result.url, result.title, _cut(result.text, config["max_chars"])) for result in kept]
    if action.type != "search":
        shown = [WebResult(result.url, result.title, result.text[: config["max_chars"] * 4]) for result in kept]
    return web_search_output(action, shown, keep_sources=config["keep_sources"])
