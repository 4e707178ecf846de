"""Vector stores: create (with files), retrieve, list, update, delete, and search (app/retrieval ranks)."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

from app.db.base import utc_now
from app.db.models import VectorStoreRow
from app.errors import InvalidRequest, NotFound, ServiceUnavailable
from app.generation.embeddings.base import EmbeddingUnavailable
from app.generation.embeddings.models import vector_store_model
from app.ids import new_id
from app.quotas.stored_bytes import charge_stored_bytes, json_size
from app.retrieval.filters import parse_filter
from app.retrieval.ranking import RankingOptions
from app.retrieval.search import Searcher, SearchRequest, StoreExpired, StoreNotFound, search
from app.runtime import Runtime
from app.schemas.paging import PageRequest, cursor_page, page_after
from app.vector_stores import repository
from app.vector_stores.files_service import attach_files, chunking_of, mark_active, store_object
from app.vector_stores.schemas import (
    CreateVectorStoreRequest,
    FileParam,
    SearchResult,
    SearchResultsPage,
    SearchVectorStoreRequest,
    TextContent,
    UpdateVectorStoreRequest,
    VectorStoreDeleted,
    VectorStoreList,
    VectorStoreObject,
)


def store_not_found(store_id: str) -> NotFound:
    return NotFound(f"No vector store found with id '{store_id}'.", param="vector_store_id")


async def get_store_row(runtime: Runtime, store_id: str, tenant: str) -> VectorStoreRow:
    async with runtime.database.read() as session:
        row = await repository.get_store(session, store_id, tenant)
    if row is None:
        raise store_not_found(store_id)
    return row


async def describe(runtime: Runtime, rows: list[VectorStoreRow]) -> list[VectorStoreObject]:
    async with runtime.database.read() as session:
        counts = await repository.file_counts(session, [row.id for row in rows])
    return [store_object(row, *counts.get(row.id, ({}, 0))) for row in rows]


async def create_store(runtime: Runtime, tenant: str, body: CreateVectorStoreRequest) -> VectorStoreObject:
    now = utc_now()
    days = body.expires_after.days if body.expires_after is not None else None
    row = VectorStoreRow(
        id=new_id("vs"),
        tenant=tenant,
        name=body.name or "",
        description=body.description,
        metadata_=body.metadata,
        embedding_model=vector_store_model(runtime.settings, runtime.embedding_models),
        expires_after_days=days,
        created_at=now,
        last_active_at=now,
        expires_at=now + timedelta(days=days) if days is not None else None,
    )
    chunking = chunking_of(body.chunking_strategy, "chunking_strategy")
    async with runtime.database.transaction() as session:
        session.add(row)
        await session.flush()
        files = [FileParam(file_id=file_id) for file_id in body.file_ids or []]
        await attach_files(session, runtime, row, files, chunking=chunking, attributes=None, batch_id=None)
        await charge_stored_bytes(session, runtime, tenant, lambda: json_size(row.name, row.description, row.metadata_))
    if body.file_ids:
        runtime.wake_indexer()
    return (await describe(runtime, [row]))[0]


async def get_store(runtime: Runtime, store_id: str, tenant: str) -> VectorStoreObject:
    return (await describe(runtime, [await get_store_row(runtime, store_id, tenant)]))[0]


async def list_stores(runtime: Runtime, tenant: str, page: PageRequest) -> VectorStoreList:
    async with runtime.database.read() as session:
        rows, has_more = await page_after(
            page,
            partial(repository.get_store, session, tenant=tenant),
            lambda after: repository.page_stores(session, tenant, limit=page.limit, order=page.order, after=after),
            unknown_after=lambda after: f"Invalid 'after': no vector store '{after}'.",
        )
    return cursor_page(VectorStoreList, await describe(runtime, rows), has_more)


async def update_store(
    runtime: Runtime, store_id: str, tenant: str, body: UpdateVectorStoreRequest, fields: set[str]
) -> VectorStoreObject:
    """Change what the body names (`fields`: the keys it sent; `expires_after: null` keeps the store for ever)."""
    async with runtime.database.transaction() as session:
        row = await repository.get_store(session, store_id, tenant)
        if row is None:
            raise store_not_found(store_id)
        if "name" in fields and body.name is not None:
            row.name = body.name
        if "metadata" in fields:
            row.metadata_ = body.metadata
        if "expires_after" in fields:
            row.expires_after_days = body.expires_after.days if body.expires_after is not None else None
        mark_active(row)
        await session.flush()
        await charge_stored_bytes(session, runtime, tenant, lambda: json_size(row.name, row.metadata_))
    return (await describe(runtime, [row]))[0]


async def delete_store(runtime: Runtime, store_id: str, tenant: str) -> VectorStoreDeleted:
    async with runtime.database.transaction() as session:
        if await repository.get_store(session, store_id, tenant) is None:
            raise store_not_found(store_id)
        await repository.delete_store(session, store_id)
    return VectorStoreDeleted(id=store_id)


def search_request(body: SearchVectorStoreRequest) -> SearchRequest:
    """The API's search body as retrieval takes it (filters checked: a 400 naming what is wrong)."""
    filters = None
    if body.filters is not None:
        try:
            filters = parse_filter(body.filters)
        except ValueError as error:
            raise InvalidRequest(f"Invalid 'filters': {error}.", param="filters", code="invalid_value") from None
    options = body.ranking_options
    ranking = RankingOptions()
    if options is not None:
        hybrid = options.hybrid_search
        ranking = RankingOptions(
            ranker=options.ranker,
            score_threshold=options.score_threshold,
            embedding_weight=hybrid.embedding_weight if hybrid is not None else 1.0,
            text_weight=hybrid.text_weight if hybrid is not None else 1.0,
        )
    return SearchRequest(
        queries=[body.query] if isinstance(body.query, str) else body.query,
        filters=filters,
        max_num_results=body.max_num_results,
        ranking=ranking,
        rewrite_query=body.rewrite_query,
    )


def searcher_of(runtime: Runtime) -> Searcher:
    return Searcher(runtime.database, runtime.settings, runtime.embedder, runtime.vector_cache)


async def search_store(
    runtime: Runtime, store_id: str, tenant: str, body: SearchVectorStoreRequest
) -> SearchResultsPage:
    request = search_request(body)
    try:
        results = await search(searcher_of(runtime), tenant, [store_id], request)
    except StoreNotFound:
        raise store_not_found(store_id) from None
    except StoreExpired:
        raise InvalidRequest(
            f"Vector store '{store_id}' has expired.", param="vector_store_id", code="vector_store_expired"
        ) from None
    except EmbeddingUnavailable as error:
        raise ServiceUnavailable(f"Vector store search needs its embedding model: {error}.") from None
    data = [
        SearchResult(
            file_id=hit.file_id,
            filename=hit.filename,
            score=hit.score,
            attributes=hit.attributes,
            content=[TextContent(text=hit.text)],
        )
        for hit in results.hits
    ]
    query = results.search_query[0] if isinstance(body.query, str) else results.search_query
    return SearchResultsPage(search_query=query, data=data)
