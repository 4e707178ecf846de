"""Where the sealing keys come from: RESPONSES_SECRET_KEY (comma-separated: the first seals, every one opens), else
one random key that the first node generates and keeps in the database for every node."""

from __future__ import annotations

import base64
import os

from sqlalchemy.exc import IntegrityError

from app.config import Settings
from app.db.session import Database
from app.secrets import repository
from app.secrets.sealer import KEY_BYTES, ContentSealer, derive_key

STORED_KEY_NAME = "sealing_key"


def configured_keys(setting: str) -> list[bytes]:
    return [derive_key(secret.strip()) for secret in setting.split(",") if secret.strip()]


async def _stored_key(database: Database) -> bytes:
    """The key the first node generated; generated here if no node has yet (the first insert wins)."""
    async with database.read() as session:
        stored = await repository.get_secret(session, STORED_KEY_NAME)
    if stored is None:
        try:
            async with database.transaction() as session:
                await repository.insert_secret(
                    session, STORED_KEY_NAME, base64.b64encode(os.urandom(KEY_BYTES)).decode()
                )
        except IntegrityError:
            pass  # another node was first: use its key
        async with database.read() as session:
            stored = await repository.get_secret(session, STORED_KEY_NAME)
    assert stored is not None
    return base64.b64decode(stored)


async def load_sealer(settings: Settings, database: Database) -> ContentSealer:
    keys = configured_keys(settings.secret_key) if settings.secret_key else []
    return ContentSealer(keys or [await _stored_key(database)])
