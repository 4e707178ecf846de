"""/console serves the console's static files: the shell carries no data (the API it calls checks the key), and
nothing is fetched from elsewhere (no CDN: the machine may be offline)."""

from __future__ import annotations

import re

import httpx

from app.console.endpoints import CONSOLE_DIR


async def test_the_console_is_served_under_its_own_path(client: httpx.AsyncClient) -> None:
    root = await client.get("/console")
    assert root.status_code == 307 and root.headers["location"] == "/console/"
    index = await client.get("/console/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert '<script src="console.js">' in index.text and 'href="console.css"' in index.text
    for name, kind in (("console.js", "javascript"), ("console.css", "text/css")):
        reply = await client.get(f"/console/{name}")
        assert reply.status_code == 200 and kind in reply.headers["content-type"]
    assert (await client.get("/console/nothing.js")).status_code == 404


async def test_keyed_servers_serve_the_shell_and_guard_the_data(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    alpha, _ = two_tenants
    async with httpx.AsyncClient(transport=alpha._transport, base_url="http://t") as keyless:
        assert (await keyless.get("/console/")).status_code == 200
        assert (await keyless.get("/v1/responses")).status_code == 401


def test_nothing_is_loaded_from_another_host() -> None:
    for path in CONSOLE_DIR.iterdir():
        text = path.read_text()
        assert not re.search(r"(src|href)=\"(https?:)?//", text), path.name
        assert "import(" not in text and "@import" not in text, path.name
        # Stored text is set as text, never parsed as HTML.
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, path.name
