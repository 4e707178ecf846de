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


async def test_every_console_reply_carries_the_security_headers(client: httpx.AsyncClient) -> None:
    for path in ("/console", "/console/", "/console/index.html", "/console/console.js", "/console/console.css"):
        headers = (await client.get(path)).headers
        policy = {
            directive.split(" ", 1)[0]: directive.split(" ", 1)[1]
            for directive in (part.strip() for part in headers["content-security-policy"].split(";"))
        }
        assert policy["default-src"] == "'self'" and policy["frame-ancestors"] == "'none'", path
        assert policy["object-src"] == policy["base-uri"] == "'none'", path
        assert not any("unsafe" in sources or "*" in sources for sources in policy.values()), path
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff", path
    # The API's own replies are JSON, not pages: they are left as they were.
    assert "content-security-policy" not in (await client.get("/v1/models")).headers


def test_the_pages_need_nothing_the_policy_refuses() -> None:
    """No inline script, style or event handler attribute, no eval: the policy allows none of them."""
    page = (CONSOLE_DIR / "index.html").read_text()
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", page)), "an inline script"
    assert not re.search(r"<style|\sstyle=|\son[a-z]+=", page), "inline style or handler"
    script = (CONSOLE_DIR / "console.js").read_text()
    assert not re.search(r"\beval\(|new Function\(|setTimeout\(\s*[\"'`]|\.style\b|\"style\"", script)


async def test_the_page_scripts_are_served_and_load_before_the_router(client: httpx.AsyncClient) -> None:
    index = (await client.get("/console/")).text
    scripts = re.findall(r'<script src="([^"]+)"></script>', index)
    # console.js renders as it loads: the pages it routes to must be defined by then.
    assert scripts[-1] == "console.js" and {"projects.js", "webhooks.js", "batches.js", "vector_stores.js"} <= set(
        scripts[:-1]
    )
    for name in scripts:
        reply = await client.get(f"/console/{name}")
        assert reply.status_code == 200 and "javascript" in reply.headers["content-type"], name
        assert reply.headers["content-security-policy"].startswith("default-src 'self'"), name
