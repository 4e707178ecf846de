"""Attribute filters as the SDK types them (ComparisonFilter, CompoundFilter): parsed once (a ValueError naming
what is wrong, which the API turns into a 400), then matched against each file's attributes.

How values compare: numbers with numbers, strings with strings (in code point order), booleans only for equality;
a comparison between different types, or on an attribute the file does not have, does not match, except `ne`
and `nin`, which then do (the file's value is not the one named)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Scalar = str | float | bool
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
#: Filters nest at most this deep (a client cannot send a filter that takes a stack to evaluate).
MAX_DEPTH = 8
#: Filters in one request at most, all levels together.
MAX_FILTERS = 64


@dataclass(frozen=True, slots=True)
class Comparison:
    key: str
    type: Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]
    value: Scalar | tuple[str | float, ...]


@dataclass(frozen=True, slots=True)
class Compound:
    type: Literal["and", "or"]
    filters: tuple[Filter, ...]


Filter = Comparison | Compound


def _scalar(value: Any, where: str) -> Scalar:
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"{where}.value is too large a number") from None
    raise ValueError(f"{where}.value must be a string, a number or a boolean")


def _comparison(data: Mapping[str, Any], where: str) -> Comparison:
    key = data.get("key")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}.key must be a non-empty string")
    kind = data["type"]
    if "value" not in data:
        raise ValueError(f"{where}.value is required")
    value = data["value"]
    if kind in ("in", "nin"):
        if not isinstance(value, list) or any(isinstance(item, bool) for item in value):
            raise ValueError(f"{where}.value must be a list of strings or numbers for '{kind}'")
        items = tuple(_scalar(item, where) for item in value)
        return Comparison(key, kind, items)
    if isinstance(value, list):
        raise ValueError(f"{where}.value may be a list only for 'in' and 'nin'")
    return Comparison(key, kind, _scalar(value, where))


def parse_filter(data: Any, where: str = "filters", *, depth: int = 0, budget: list[int] | None = None) -> Filter:
    """`data` (a request's JSON) as a Filter, or a ValueError naming the part that is wrong."""
    budget = budget if budget is not None else [MAX_FILTERS]
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError(f"filters may hold at most {MAX_FILTERS} filters")
    if depth > MAX_DEPTH:
        raise ValueError(f"filters may nest at most {MAX_DEPTH} deep")
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be an object")
    kind = data.get("type")
    if kind in COMPARISONS:
        return _comparison(data, where)
    if kind in COMPOUNDS:
        filters = data.get("filters")
        if not isinstance(filters, list) or not filters:
            raise ValueError(f"{where}.filters must be a non-empty list")
        parsed = tuple(
            parse_filter(item, f"{where}.filters[{index}]", depth=depth + 1, budget=budget)
            for index, item in enumerate(filters)
        )
        return Compound(kind, parsed)
    raise ValueError(f"{where}.type must be one of {', '.join(COMPARISONS + COMPOUNDS)}")


def _same_kind(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    return (isinstance(a, str) and isinstance(b, str)) or (isinstance(a, float | int) and isinstance(b, float | int))


def _ordered(kind: str, have: Any, value: Any) -> bool:
    if not _same_kind(have, value) or isinstance(have, bool):
        return False
    if kind == "gt":
        return bool(have > value)
    if kind == "gte":
        return bool(have >= value)
    if kind == "lt":
        return bool(have < value)
    return bool(have <= value)


def _compare(comparison: Comparison, attributes: Mapping[str, Any]) -> bool:
    kind, value = comparison.type, comparison.value
    present = comparison.key in attributes
    have = attributes.get(comparison.key)
    if kind in ("in", "nin"):
        assert isinstance(value, tuple)
        found = present and any(_same_kind(have, item) and have == item for item in value)
        return found if kind == "in" else not found
    equal = present and _same_kind(have, value) and have == value
    if kind == "eq":
        return equal
    if kind == "ne":
        return not equal
    return present and _ordered(kind, have, value)


def matches(condition: Filter, attributes: Mapping[str, Any] | None) -> bool:
    """Whether a file with these attributes passes the filter."""
    attributes = attributes or {}
    if isinstance(condition, Comparison):
        return _compare(condition, attributes)
    results = (matches(part, attributes) for part in condition.filters)
    return all(results) if condition.type == "and" else any(results)


def keep(condition: Filter | None, files: Sequence[tuple[str, Mapping[str, Any] | None]]) -> list[str]:
    """The ids of the files (id, attributes) that pass; every one without a filter."""
    return [file_id for file_id, attributes in files if condition is None or matches(condition, attributes)]
