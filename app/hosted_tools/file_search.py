"""The file_search tool's call: the stores the request named searched within the response's tenant (the seam the
vector stores API shares, app/retrieval/search.py), with the tool's max_num_results, filters and ranking options."""

from __future__ import annotations

from typing import Any

from app.events.hosted_calls import file_search_output, queries_of
from app.generation.embeddings.base import EmbeddingUnavailable
from app.hosted_tools.failures import HostedCallFailed
from app.retrieval.filters import parse_filter
from app.retrieval.ranking import RankingOptions
from app.retrieval.search import Searcher, SearchRequest, StoreExpired, StoreNotFound, search
from app.schemas.hosted_items import FileSearchResult


def search_request(config: dict[str, Any], queries: list[str]) -> SearchRequest:
    """The tool's configuration (setup.py's, checked at create) as retrieval takes it."""
    options = config.get("ranking_options") or {}
    hybrid = options.get("hybrid_search") or {}
    ranking = RankingOptions(
        ranker=options.get("ranker", "auto"),
        score_threshold=options.get("score_threshold", 0.0),
        embedding_weight=hybrid.get("embedding_weight", 1.0),
        text_weight=hybrid.get("text_weight", 1.0),
    )
    filters = parse_filter(config["filters"]) if config.get("filters") is not None else None
    return SearchRequest(queries=queries, filters=filters, max_num_results=config["max_num_results"], ranking=ranking)


async def run_file_search(searcher: Searcher, tenant: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    """The call's output (events/hosted_calls.py's payload); HostedCallFailed says why there is none."""
    queries = queries_of(arguments)
    if not queries:
        raise HostedCallFailed("The file_search call gives no query.")
    try:
        results = await search(searcher, tenant, config["vector_store_ids"], search_request(config, queries))
    except StoreNotFound as missing:
        # Deleted since the create checked it (another project's store never gets this far: a 404 at create).
        raise HostedCallFailed(f"No vector store found with id '{missing.store_id}'.") from None
    except StoreExpired as expired:
        raise HostedCallFailed(f"Vector store '{expired.store_id}' has expired.") from None
    except EmbeddingUnavailable as error:
        raise HostedCallFailed(f"The vector stores' embedding model cannot be reached: {error}.") from None
    found = [
        FileSearchResult(
            file_id=hit.file_id, filename=hit.filename, score=hit.score, text=hit.text, attributes=hit.attributes
        )
        for hit in results.hits
    ]
    return file_search_output(results.search_query, found, keep_results=config["keep_results"])
