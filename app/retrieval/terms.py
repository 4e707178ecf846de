"""A query's words, as the full-text indexes take them (no operator a client could slip in), and what
`rewrite_query` does here.

NOTE: the hosted API rewrites a query with a model. No model rewrites it here: `rewrite_query: true` keeps its
content words (common English function words and punctuation dropped, each word once, lower case), which is the
query the lexical index searches in any case and the one the search page reports as `search_query`."""

from __future__ import annotations

import re

WORD = re.compile(r"\w+")
#: The most words of one query searched (a longer query is cut).
MAX_QUERY_WORDS = 64

_FUNCTION_WORDS = (
    "a an and are as at be been but by can could did do does for from had has have how i if in into is it its "
    "me my of on or our please should so than that the their them then there these they this to was we were "
    "what when where which who whom why will with would you your"
)
STOP_WORDS = frozenset(_FUNCTION_WORDS.split())


def query_words(query: str) -> list[str]:
    """The query's words, lower case, each once, in order (at most MAX_QUERY_WORDS)."""
    seen: dict[str, None] = {}
    for word in WORD.findall(query.lower()):
        seen.setdefault(word, None)
        if len(seen) == MAX_QUERY_WORDS:
            break
    return list(seen)


def rewrite(query: str) -> str:
    """The query's content words (its words when every one is a function word)."""
    return " ".join(content_words(query))


#: Endings folded away before words are compared (a light stemmer: "tomatoes" meets "tomato", "watering" "water").
_ENDINGS = (("ies", "y"), ("ing", ""), ("es", ""), ("ed", ""), ("s", ""))


def stem(word: str) -> str:
    for ending, replacement in _ENDINGS:
        if len(word) > len(ending) + 2 and word.endswith(ending):
            return word[: -len(ending)] + replacement
    return word


def content_words(query: str) -> list[str]:
    """The words a query asks for: its content words (all its words when each is a function word)."""
    words = query_words(query)
    return [word for word in words if word not in STOP_WORDS] or words


def coverage(wanted: list[str], text: str) -> float:
    """The share of `wanted` words (content_words) that `text` holds, compared stemmed: 0..1."""
    if not wanted:
        return 0.0
    held = {stem(word) for word in WORD.findall(text.lower())}
    return sum(1 for word in wanted if stem(word) in held) / len(wanted)
