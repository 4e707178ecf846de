"""Searching vector stores: the seam that the vector stores API and the file_search tool share.

`search(...)` takes a tenant, store ids, queries, filters, a result count and ranking options, and answers the
ranked chunks. It ranks lexically with the database's own full-text index (Postgres full-text search, SQLite
FTS5) and, for stores embedded by a model, by embedding too (the query embedded through the same Embedder as
/v1/embeddings), both fused as ranking.py says. It needs no HTTP: a job calls it with its response's tenant."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.config import Settings
from app.db.base import utc_now
from app.db.models import VectorStoreRow
from app.db.session import Database
from app.generation.embeddings.base import Embedder, EmbeddingUnavailable
from app.read_cache.vectors import StoreVectorCache, StoreVectors
from app.retrieval import repository, terms
from app.retrieval.filters import Filter, keep, matches
from app.retrieval.ranking import RankingOptions, combine
from app.retrieval.vectors import nearest_in, store_vectors

logger = logging.getLogger(__name__)

#: The most results one search returns (the API's bound on max_num_results).
MAX_RESULTS = 50
#: Candidates each ranking contributes before fusion, at least (or 4 per result asked for).
MIN_CANDIDATES = 40


class StoreNotFound(Exception):
    def __init__(self, store_id: str) -> None:
        super().__init__(store_id)
        self.store_id = store_id


class StoreExpired(Exception):
    def __init__(self, store_id: str) -> None:
        super().__init__(store_id)
        self.store_id = store_id


@dataclass(frozen=True, slots=True)
class SearchRequest:
    queries: Sequence[str]
    filters: Filter | None = None
    max_num_results: int = 10
    ranking: RankingOptions = field(default_factory=RankingOptions)
    rewrite_query: bool = False


@dataclass(frozen=True, slots=True)
class SearchHit:
    vector_store_id: str
    file_id: str
    filename: str
    score: float
    attributes: dict[str, Any] | None
    text: str
    #: The chunk's id and its place in its file (a citation can name it).
    chunk_id: int
    position: int


@dataclass(frozen=True, slots=True)
class SearchResults:
    #: The queries as searched (rewritten where asked).
    search_query: list[str]
    hits: list[SearchHit]


@dataclass(frozen=True, slots=True)
class Searcher:
    """What a search needs, in whatever process runs it."""

    database: Database
    settings: Settings
    embedder: Embedder | None
    #: The stores' vectors kept in this process between searches (a process's one cache; none: read each time).
    vectors: StoreVectorCache = field(default_factory=lambda: StoreVectorCache(0))


async def _stores(searcher: Searcher, tenant: str, store_ids: Sequence[str]) -> list[VectorStoreRow]:
    async with searcher.database.read() as session:
        found = {store.id: store for store in await repository.stores_of(session, tenant, store_ids)}
    now = utc_now()
    for store_id in store_ids:
        store = found.get(store_id)
        if store is None:
            raise StoreNotFound(store_id)
        if store.expires_at is not None and store.expires_at <= now:
            raise StoreExpired(store_id)
    return list(found.values())


async def _vector_hits(
    searcher: Searcher,
    stores: Sequence[VectorStoreRow],
    file_ids: Sequence[str] | None,
    query: str,
    limit: int,
) -> list[tuple[int, float]] | None:
    """The nearest chunks by embedding, over the stores that have an embedding model (None: none has)."""
    by_model: dict[str, list[str]] = {}
    for store in stores:
        if store.embedding_model is not None:
            by_model.setdefault(store.embedding_model, []).append(store.id)
    if not by_model:
        return None
    if searcher.embedder is None:
        raise EmbeddingUnavailable("no embedding model can be reached from this process")
    hits: list[tuple[int, float]] = []
    for model, ids in by_model.items():
        count, matrices = await _store_vectors(searcher, ids)
        if count > searcher.settings.vector_search_max_chunks:
            logger.warning(
                "vector stores %s hold %d embedded chunks, over RESPONSES_VECTOR_SEARCH_MAX_CHUNKS: ranked lexically "
                "only",
                ",".join(ids),
                count,
            )
            continue
        vector = (await searcher.embedder.embed(model, [query])).vectors[0]
        hits.extend(nearest_in(vector, matrices, file_ids, limit))
    return sorted(hits, key=lambda hit: -hit[1])[:limit]


async def _store_vectors(searcher: Searcher, store_ids: Sequence[str]) -> tuple[int, list[StoreVectors]]:
    """How many chunks the stores hold, and their vectors: from this process's cache while they are unchanged, else
    read (and kept); none read when the count is over RESPONSES_VECTOR_SEARCH_MAX_CHUNKS."""
    async with searcher.database.read() as session:
        revisions = {store_id: await repository.vector_revision(session, store_id) for store_id in store_ids}
        total = sum(count for count, _ in revisions.values())
        if total > searcher.settings.vector_search_max_chunks:
            return total, []
        found = []
        for store_id, revision in revisions.items():
            cached = searcher.vectors.get(store_id, revision)
            if cached is None:
                cached = store_vectors(revision, await repository.store_embeddings(session, store_id))
                searcher.vectors.put(store_id, cached)
            found.append(cached)
    return total, found


async def _text_hits(
    searcher: Searcher, store_ids: Sequence[str], file_ids: Sequence[str] | None, query: str, limit: int
) -> list[tuple[int, float]]:
    """The lexical hits, scored by the share of the query's content words each holds, best first. Only the content
    words are searched: a function word ("how", "do") would match nearly every chunk, at a cost and for nothing."""
    async with searcher.database.read() as session:
        ranked = await repository.lexical_hits(session, store_ids, file_ids, terms.content_words(query), limit)
        texts = await repository.chunk_texts_by_id(session, [chunk_id for chunk_id, _ in ranked])
    wanted = terms.content_words(query)
    # The database's order kept among equal shares of the query (a stable sort).
    scored = [(chunk_id, terms.coverage(wanted, texts.get(chunk_id, ""))) for chunk_id, _ in ranked]
    return sorted((hit for hit in scored if hit[1] > 0), key=lambda hit: -hit[1])


async def _rank(
    searcher: Searcher,
    stores: Sequence[VectorStoreRow],
    file_ids: Sequence[str] | None,
    query: str,
    request: SearchRequest,
) -> list[tuple[int, float]]:
    limit = max(MIN_CANDIDATES, request.max_num_results * 4)
    options = request.ranking
    vector_hits = None
    if options.embedding_weight > 0 or options.ranker == "none":
        vector_hits = await _vector_hits(searcher, stores, file_ids, query, limit)
    if vector_hits is not None and (options.ranker == "none" or options.text_weight <= 0):
        return combine(vector_hits, [], options)  # the lexical ranking would weigh nothing
    text_hits = await _text_hits(searcher, [store.id for store in stores], file_ids, query, limit)
    return combine(vector_hits, text_hits, options)


def _hits(
    ranked: Sequence[tuple[int, float]],
    chunks: dict[int, repository.FoundChunk],
    files: Sequence[repository.SearchableFile],
    filters: Filter | None,
) -> list[SearchHit]:
    by_key = {(entry.vector_store_id, entry.file_id): entry for entry in files}
    hits = []
    for chunk_id, score in ranked:
        chunk = chunks.get(chunk_id)
        entry = by_key.get((chunk.vector_store_id, chunk.file_id)) if chunk is not None else None
        if chunk is None or entry is None:
            continue  # its file was detached meanwhile
        if filters is not None and not matches(filters, entry.attributes):
            continue  # the same file, attached to another of the stores with other attributes
        hits.append(
            SearchHit(
                chunk.vector_store_id,
                chunk.file_id,
                entry.filename,
                round(score, 6),
                entry.attributes,
                chunk.text,
                chunk.id,
                chunk.position,
            )
        )
    return hits


async def search(searcher: Searcher, tenant: str, store_ids: Sequence[str], request: SearchRequest) -> SearchResults:
    """The best chunks of the tenant's stores for the request's queries (a chunk found by several queries counts
    with its best score). StoreNotFound for a store the tenant does not have (another tenant's included),
    StoreExpired for one past its expiry; EmbeddingUnavailable when a store's embedding model cannot be reached."""
    stores = await _stores(searcher, tenant, store_ids)
    queries = [terms.rewrite(query) if request.rewrite_query else query for query in request.queries]
    files: list[repository.SearchableFile] | None = None
    file_ids: list[str] | None = None
    if request.filters is not None:
        # Filtered: every file's attributes are read first (the chunks searched are the matching files' only).
        async with searcher.database.read() as session:
            files = await repository.searchable_files(session, store_ids)
        file_ids = keep(request.filters, [(entry.file_id, entry.attributes) for entry in files])
    best: dict[int, float] = {}
    if file_ids is None or file_ids:
        for query in queries:
            for chunk_id, score in await _rank(searcher, stores, file_ids, query, request):
                best[chunk_id] = max(score, best.get(chunk_id, 0.0))
    ranked = sorted(
        ((chunk_id, score) for chunk_id, score in best.items() if score >= request.ranking.score_threshold),
        key=lambda hit: (-hit[1], hit[0]),
    )[: request.max_num_results]
    async with searcher.database.read() as session:
        chunks = await repository.chunks_by_id(session, [chunk_id for chunk_id, _ in ranked])
        if files is None:  # unfiltered: the hits' files only
            keys = {(chunk.vector_store_id, chunk.file_id) for chunk in chunks.values()}
            files = await repository.files_of(session, keys)
    if any(utc_now() - store.last_active_at >= repository.TOUCH_EVERY for store in stores):
        async with searcher.database.transaction() as session:
            await repository.touch_stores(session, stores, utc_now())
    return SearchResults(search_query=queries, hits=_hits(ranked, chunks, files, request.filters))
