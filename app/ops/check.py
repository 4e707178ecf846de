"""`llama-responses check`: whether this configuration can run (settings, models, database schema, Redis), and for
each thing that is wrong, how to fix it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from app.config import Settings, setting_problems
from app.db.migrations import current_revision, head_revision
from app.db.session import create_engine
from app.generation.embeddings.models import load_embedding_models
from app.generation.registry import ModelConfigError
from app.generation.registry_loading import load_registry
from app.transport.redis_queue import ArqQueue

#: A check that waits longer than this on a server reports it unreachable.
CHECK_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Finding:
    subject: str
    ok: bool
    detail: str
    fix: str | None = None


def load_settings() -> tuple[Settings | None, Finding]:
    try:
        settings = Settings()
    except ValidationError as error:
        wrong = "; ".join(setting_problems(error))
        fix = "correct these environment variables (or .env); see docs/reference/settings.md"
        return None, Finding("settings", False, wrong, fix)
    mode = "embedded mode (no Redis)" if settings.embedded else "distributed mode"
    keys = (
        f"{len(settings.api_keys)} bootstrap API key(s)"
        if settings.api_keys
        else "no bootstrap API keys (an open server unless `llama-responses keys create` made some)"
    )
    return settings, Finding("settings", True, f"{mode}, {keys}")


def check_models(settings: Settings) -> Finding:
    try:
        registry = load_registry(settings)
        embedding = load_embedding_models(settings, registry.ids)
    except ModelConfigError as error:
        return Finding(
            "models",
            False,
            str(error),
            "correct RESPONSES_MODELS_FILE, RESPONSES_MODELS, RESPONSES_MODELS_DIR or RESPONSES_MODEL_PATH "
            "(docs/operating/models.md)",
        )
    served = ", ".join(f"{spec.id} ({spec.path.stat().st_size / 2**20:.0f} MiB)" for spec in registry)
    embeds = f"; embedding: {', '.join(embedding.ids)}" if len(embedding) else ""
    return Finding("models", True, f"{served}; default {registry.default.id}{embeds}")


def _safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


async def check_database(settings: Settings) -> Finding:
    url = settings.database_url
    where = _safe_url(url)
    if settings.is_sqlite:
        database = make_url(url).database
        if database and database != ":memory:" and not await asyncio.to_thread(Path(database).exists):
            return Finding("database", True, f"{where} does not exist yet: `llama-responses serve` creates it")
    engine = create_engine(url)
    try:
        current = await asyncio.wait_for(current_revision(engine), CHECK_TIMEOUT_S)
    except Exception as error:
        return Finding(
            "database",
            False,
            f"cannot reach {where}: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            "check RESPONSES_DATABASE_URL (host, port, user, password, database name) and that the server is up",
        )
    finally:
        await engine.dispose()
    head = head_revision(url)
    if current != head:
        fix = "run `llama-responses migrate`"
        if settings.is_sqlite:
            fix += " (or start `serve`, which upgrades SQLite itself)"
        return Finding("database", False, f"{where}: schema at {current or 'nothing'}, not at {head}", fix)
    return Finding("database", True, f"{where}: schema at head ({head})")


async def check_redis(settings: Settings) -> Finding:
    if settings.redis_url is None:
        return Finding("redis", True, "not configured: generation runs in the server process")
    where = _safe_url(settings.redis_url)
    queue: ArqQueue | None = None
    try:
        # The queue the server would use (connecting pings Redis), and its own count of live workers.
        queue = await asyncio.wait_for(ArqQueue.connect(settings), CHECK_TIMEOUT_S)
        workers = await asyncio.wait_for(queue.live_workers(), CHECK_TIMEOUT_S)
    except Exception as error:
        return Finding(
            "redis",
            False,
            f"cannot reach {where}: {error or type(error).__name__}",
            "check RESPONSES_REDIS_URL and that Redis is up (or unset it for embedded mode)",
        )
    finally:
        if queue is not None:
            await queue.close()
    # No worker yet is no problem here (they may start after the API), but foreground creates wait for one.
    return Finding("redis", True, f"{where} answers; {workers} worker(s) alive")


async def run_checks(settings: Settings) -> list[Finding]:
    return [check_models(settings), await check_database(settings), await check_redis(settings)]


def report(findings: list[Finding]) -> str:
    lines = []
    for finding in findings:
        lines.append(f"{'ok' if finding.ok else 'PROBLEM':<8} {finding.subject:<9} {finding.detail}")
        if finding.fix:
            lines.append(f"{'':<8} {'':<9} fix: {finding.fix}")
    wrong = sum(not finding.ok for finding in findings)
    lines.append("all good" if not wrong else f"{wrong} problem(s)")
    return "\n".join(lines)
