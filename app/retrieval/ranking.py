"""How a search's results are ranked and scored: the ranking options as the API takes them, the lexical and vector
scores mapped to 0..1, and the two lists fused by weighted reciprocal rank (hybrid search).

Scores: a vector hit's is its cosine similarity (below 0 as 0); a lexical hit's is the share of the query's content
words its chunk holds (compared stemmed: terms.coverage), its order among equal shares the database's own ranking
(SQLite FTS5's bm25, Postgres's ts_rank_cd); a fused hit's is its weighted reciprocal rank sum divided by the best
possible one (first in both lists: 1.0). `score_threshold` applies to the score a result is returned with.

NOTE: BM25 alone has no scale (a word in every chunk of a small store scores about 0), so it orders the lexical
hits but does not score them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: Reciprocal rank fusion's constant (the usual 60): a rank's weight is 1 / (RRF_K + rank).
RRF_K = 60
#: Ranker names the API takes; "none" ranks by the primary list alone (embeddings where the store has them).
RANKERS = ("none", "auto", "default-2024-11-15")


@dataclass(frozen=True, slots=True)
class RankingOptions:
    ranker: Literal["none", "auto", "default-2024-11-15"] = "auto"
    score_threshold: float = 0.0
    #: hybrid_search's weights: of the embedding ranking and of the text (full-text) ranking.
    embedding_weight: float = 1.0
    text_weight: float = 1.0


def vector_score(similarity: float) -> float:
    return min(max(similarity, 0.0), 1.0)


def fuse(
    vector_hits: Sequence[tuple[int, float]], text_hits: Sequence[tuple[int, float]], options: RankingOptions
) -> list[tuple[int, float]]:
    """Each chunk of either list (best first) with its fused score, best first."""
    total = options.embedding_weight + options.text_weight
    if total <= 0:
        return []
    scores: dict[int, float] = {}
    for weight, hits in ((options.embedding_weight, vector_hits), (options.text_weight, text_hits)):
        if weight <= 0:
            continue  # a list weighed 0 contributes nothing, its candidates included
        for rank, (chunk_id, _) in enumerate(hits, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (RRF_K + rank)
    best = total / (RRF_K + 1)
    return sorted(((chunk_id, score / best) for chunk_id, score in scores.items()), key=lambda hit: -hit[1])


def combine(
    vector_hits: Sequence[tuple[int, float]] | None,
    text_hits: Sequence[tuple[int, float]],
    options: RankingOptions,
) -> list[tuple[int, float]]:
    """The ranked hits (chunk id, score in 0..1), best first: fused when both lists ran and the ranker fuses, else
    the vector list (ranker "none" with embeddings), else the lexical one (scored already, best first).
    `vector_hits` None: no embeddings searched."""
    text = list(text_hits)
    if vector_hits is None:
        return text
    vectors = [(chunk_id, vector_score(similarity)) for chunk_id, similarity in vector_hits]
    if options.ranker == "none":
        return vectors
    return fuse(vectors, text, options)
