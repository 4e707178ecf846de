"""The caller a process that runs jobs holds for its responses' hosted tool calls (the tool loop's, between rounds):
a file_search searched within the response's tenant, a web_search through the operator's backend."""

from __future__ import annotations

import json
from typing import Any

from app.config import Settings
from app.db.session import Database
from app.generation.embeddings.base import Embedder
from app.hosted_tools.failures import HostedCallFailed
from app.hosted_tools.file_search import run_file_search
from app.hosted_tools.web_search import WebBackend, run_web_search
from app.outbound.addresses import AllowedHosts
from app.read_cache.vectors import StoreVectorCache
from app.retrieval.search import Searcher
from app.schemas.tools import FILE_SEARCH, WEB_SEARCH


class HostedCaller:
    def __init__(
        self,
        database: Database,
        settings: Settings,
        embedder: Embedder | None = None,
        vectors: StoreVectorCache | None = None,
    ) -> None:
        self.database = database
        self.settings = settings
        #: Embeds the queries of stores that have an embedding model (embedded mode sets it once it is built).
        self.embedder = embedder
        #: The stores' vectors kept between searches (embedded mode shares the API's).
        self.vectors = vectors if vectors is not None else StoreVectorCache(int(settings.vector_cache_mb * 2**20))
        self.allowed = AllowedHosts.parse(settings.outbound_allowed_hosts)

    def searcher(self) -> Searcher:
        return Searcher(self.database, self.settings, self.embedder, self.vectors)

    async def call(self, tool: str, tenant: str, config: dict[str, Any], arguments: str) -> str:
        """The call's output; HostedCallFailed for arguments that are not a JSON object, or a call that fails."""
        try:
            parsed: Any = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise HostedCallFailed(f"The arguments of '{tool}' are not a JSON object.")
        if tool == FILE_SEARCH:
            return await run_file_search(self.searcher(), tenant, config, parsed)
        if tool == WEB_SEARCH:
            return await run_web_search(WebBackend(self.settings, self.allowed, self.searcher()), config, parsed)
        raise HostedCallFailed(f"'{tool}' is no hosted tool of this server.")
