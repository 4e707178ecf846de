"""/console: the web console's static files (static/). The pages hold no data: they read everything through
the API with the key the person enters, so the API's auth and tenant checks are the console's."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

CONSOLE_DIR = Path(__file__).resolve().parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/console")
async def console_root() -> RedirectResponse:
    # With the slash, the page's relative links (console.js, console.css) resolve under /console/.
    return RedirectResponse("/console/")


def mount_console(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/console", StaticFiles(directory=CONSOLE_DIR, html=True), name="console")
