"""The console's server overview: its script is served with the console's policy (after usage.js, whose SVG
helper it draws with, and before console.js, which routes to it), its link is hidden until the key is known to be
an admin's, and it needs nothing the Content-Security-Policy refuses. It reads the metrics it documents, and they
exist. (Its parser and charts run in a browser: tests/browser/test_console_server.py.)"""

from __future__ import annotations

import re

import httpx

from app.console.endpoints import CONSOLE_DIR, CONTENT_SECURITY_POLICY
from app.observability.metrics import defined_names


async def test_the_server_script_is_served_with_the_policy_between_its_helpers_and_the_router(
    client: httpx.AsyncClient,
) -> None:
    index = (await client.get("/console/")).text
    assert re.search(r'<a id="server-link" href="#/server" hidden>Server</a>', index)
    scripts = re.findall(r'<script src="([^"]+)"></script>', index)
    assert scripts.index("usage.js") < scripts.index("server.js") < scripts.index("console.js")
    reply = await client.get("/console/server.js")
    assert reply.status_code == 200 and "javascript" in reply.headers["content-type"]
    assert reply.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert reply.headers["x-frame-options"] == "DENY"
    assert "serverPage(params)" in (CONSOLE_DIR / "console.js").read_text()
    # The link shows once the key API answers (an admin's key), and hides when it refuses.
    projects = (CONSOLE_DIR / "projects.js").read_text()
    assert "serverLink.hidden = true" in projects and "serverLink.hidden = false" in projects


def test_the_server_script_needs_nothing_the_policy_refuses() -> None:
    script = (CONSOLE_DIR / "server.js").read_text()
    assert not re.search(r"\beval\(|new Function\(|set(Timeout|Interval)\(\s*[\"'`]|\.style\b|\"style\"", script)
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script


def test_the_metrics_it_charts_are_defined() -> None:
    script = (CONSOLE_DIR / "server.js").read_text()
    charted = set(re.findall(r'"(llama_responses_[a-z_]+)"', script))
    assert len(charted) == 4 and charted <= defined_names()
