"""The `LimitsPolicy` (app/limits/policy.py) of API nodes and workers: a project's limits as read from the database
at most RESPONSES_KEY_CACHE_TTL_S ago (so a change applies on every node within that time, as a revoked key does),
the server's settings for every other tenant."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from app.config import Settings
from app.db.session import Database
from app.errors import outage_error
from app.keys import repository
from app.keys.project_limits import effective, server_limits
from app.limits.policy import TenantLimits
from app.tenants.identity import project_of_tenant

logger = logging.getLogger(__name__)

#: Projects remembered at once (ids a client cannot choose: a project tenant comes from a key or an admin's
#: OpenAI-Project header naming one that exists); the oldest go first.
MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class _Entry:
    limits: TenantLimits
    read_at_s: float


class ProjectLimitsCache:
    """NOTE: in memory on purpose, as app/keys/cache.py's KeyCache: a copy of the database a few seconds old, and
    each node keeps its own."""

    def __init__(
        self,
        database: Database,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._database = database
        self._server = server_limits(settings)
        self._ttl_s = settings.key_cache_ttl_s
        self._clock = clock
        self._max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    async def limits_of(self, tenant: str) -> TenantLimits:
        project_id = project_of_tenant(tenant)
        if project_id is None:
            return self._server
        now_s = self._clock()
        entry = self._entries.get(project_id)
        if entry is not None and now_s - entry.read_at_s < self._ttl_s:
            return entry.limits
        try:
            limits = await self._read(project_id)
        except Exception as error:
            unavailable = outage_error(error)
            if unavailable is None:
                raise
            if entry is not None:
                # The last limits read beat none: the request goes on under them until the database is back.
                logger.warning(
                    "could not read the limits of project %s, using those read before: %s", project_id, error
                )
                return entry.limits
            raise unavailable from error
        self._entries[project_id] = _Entry(limits, now_s)
        self._entries.move_to_end(project_id)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        return limits

    async def _read(self, project_id: str) -> TenantLimits:
        async with self._database.read() as session:
            project = await repository.project_by_id(session, project_id)
        return effective(self._server, project)
