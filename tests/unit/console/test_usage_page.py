"""The console's usage page: its script is served with the others (before console.js, which routes to it), the
nav links to it, and it needs nothing the Content-Security-Policy refuses (no eval, no inline style)."""

from __future__ import annotations

import re

import httpx

from app.console.endpoints import CONSOLE_DIR


async def test_the_usage_script_is_served_before_the_router_that_calls_it(client: httpx.AsyncClient) -> None:
    index = (await client.get("/console/")).text
    assert 'href="#/usage"' in index
    assert index.index('<script src="usage.js">') < index.index('<script src="console.js">')
    reply = await client.get("/console/usage.js")
    assert reply.status_code == 200 and "javascript" in reply.headers["content-type"]
    assert reply.headers["content-security-policy"].startswith("default-src 'self'")
    assert "usagePage(params)" in (CONSOLE_DIR / "console.js").read_text()


def test_the_usage_script_needs_nothing_the_policy_refuses() -> None:
    script = (CONSOLE_DIR / "usage.js").read_text()
    assert not re.search(r"\beval\(|new Function\(|setTimeout\(\s*[\"'`]|\.style\b|\"style\"", script)
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script
    # It reads the API it documents: the JSON report and the CSV.
    assert '"/usage"' in script and '"/v1/usage.csv"' in script
