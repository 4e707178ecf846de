"""The read cache's listener: the connection it opens is the database URL's, and a notification's payload names
the response and its tenant (the trigger's format: tests/integration/responses/test_read_notifications.py runs it
on Postgres)."""

from __future__ import annotations

from datetime import UTC, datetime

from app.read_cache.cache import CachedJson, ResponseJsonCache
from app.read_cache.listener import ChangeListener, connect_arguments


def test_the_listening_connection_is_made_with_the_database_urls_arguments() -> None:
    url = "postgresql+asyncpg://reader:secret@db.internal:5433/responses?ssl=require"
    assert connect_arguments(url) == {
        "user": "reader",
        "password": "secret",
        "host": "db.internal",
        "port": 5433,
        "database": "responses",
        "ssl": "require",
    }


def test_a_notification_drops_the_response_it_names_for_its_tenant() -> None:
    cache = ResponseJsonCache(max_bytes=1000, staleness_s=1.0)
    listener = ChangeListener("postgresql+asyncpg://postgres@127.0.0.1/test", cache)
    version = datetime(2026, 12, 7, tzinfo=UTC)
    for tenant in ("project one", "other"):  # a tenant may hold a space: the id is what comes first
        cache.put(tenant, "resp_1", frozenset(), CachedJson(version, b"{}"))
    listener._on_notification(object(), 1, "llama_responses_changed", "resp_1 project one")
    assert cache.get("project one", "resp_1", frozenset()) is None
    assert cache.get("other", "resp_1", frozenset()) is not None
