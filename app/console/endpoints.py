"""/console: the web console's static files (static/). The pages hold no data: they read everything through
the API with the key the person enters, so the API's auth and tenant checks are the console's. Every page and file
under /console carries a strict Content-Security-Policy and the headers that keep it out of other sites' frames."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

CONSOLE_DIR = Path(__file__).resolve().parent / "static"

#: What the pages need and no more: their own script, style sheet and API calls (all same-origin; no inline
#: script or style, no eval). Directives that do not fall back to default-src are closed one by one.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    # frame-ancestors' equivalent for browsers that predate it.
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}
_RAW_SECURITY_HEADERS = [(name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()]

router = APIRouter(include_in_schema=False)


@router.get("/console")
async def console_root() -> RedirectResponse:
    # With the slash, the page's relative links (console.js, console.css) resolve under /console/.
    return RedirectResponse("/console/", headers=SECURITY_HEADERS)


class ConsoleFiles(StaticFiles):
    """The static files, each with SECURITY_HEADERS (a 304 too; a 404 is the app's JSON error, like the API's)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_RAW_SECURITY_HEADERS]
            await send(message)

        await super().__call__(scope, receive, send_secured)


def mount_console(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/console", ConsoleFiles(directory=CONSOLE_DIR, html=True), name="console")
