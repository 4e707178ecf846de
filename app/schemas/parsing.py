"""A request body (or WebSocket message) -> a JSON object, then a pydantic schema, or a 400 that names what is wrong:
within the size and nesting limits, and only text that every database can store (the one place where request text
is checked, before anything is stored)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Collection
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.config import Settings
from app.errors import InvalidRequest, RequestTooLarge, validation_error

Body = TypeVar("Body", bound=BaseModel)


#: Lone UTF-16 surrogates: JSON's \ud800 escapes decode to them, and no UTF-8 text (nor any database) holds them.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def request_too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"The request body is larger than this server's limit of {limit} bytes.", code="request_too_large"
    )


def parse_json_object(body: bytes | str, settings: Settings) -> dict[str, Any]:
    """The body as a JSON object, or a 400: within the size and nesting limits, and only text that every
    database can store (the one place where request text is checked, before anything is stored)."""
    # In bytes, as HTTP counts a body: a WebSocket text message comes as characters (up to 4 bytes each).
    size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8", "surrogatepass"))
    if size > settings.max_request_bytes:
        raise request_too_large(settings.max_request_bytes)
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidRequest(
            "We could not parse the JSON body of your request. The body must be a valid JSON object.",
            code="invalid_json",
        ) from None
    except ValueError:
        # An integer of more digits than the interpreter converts from text (sys.get_int_max_str_digits()).
        raise InvalidRequest(
            f"We could not parse the JSON body of your request: it holds an integer of more than "
            f"{sys.get_int_max_str_digits()} digits.",
            code="invalid_json",
        ) from None
    except RecursionError:  # nested deeper than the interpreter's own limit
        raise _too_deep(settings.max_json_depth, None) from None
    if not isinstance(payload, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    check_json_text(payload, settings.max_json_depth)
    return payload


def _too_deep(limit: int, param: str | None) -> InvalidRequest:
    return InvalidRequest(
        f"The request body nests objects and arrays more than {limit} levels deep.", param=param, code="invalid_json"
    )


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_json_text(value: Any, max_depth: int) -> None:
    """A 400 naming the first place where `value` nests deeper than `max_depth` or holds a lone surrogate (in a
    key or a string). Iterative: a deep document cannot exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, str):
            if LONE_SURROGATE.search(node):
                raise _lone_surrogate(path)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth >= max_depth:
            raise _too_deep(max_depth, path or None)
        if isinstance(node, list):
            stack.extend((child, _child(path, index), depth + 1) for index, child in enumerate(node))
            continue
        for key, child in node.items():
            if LONE_SURROGATE.search(key):
                raise _lone_surrogate(_child(path, key.encode("utf-8", "backslashreplace").decode()))
            stack.append((child, _child(path, key), depth + 1))


def _lone_surrogate(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid value for '{param}': the text holds a lone UTF-16 surrogate (such as \\ud800), which is not "
        "valid Unicode.",
        param=param or None,
        code="invalid_value",
    )


def reject_unknown(payload: dict[str, Any], known: Collection[str], settings: Settings) -> None:
    """Strict mode: a field not in `known` is a 400 naming it."""
    if settings.strict_params:
        unknown = sorted(set(payload) - set(known))
        if unknown:
            raise InvalidRequest(f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter")


def parse_payload(
    payload: dict[str, Any], model: type[Body], settings: Settings, *, known: Collection[str] | None = None
) -> Body:
    """A JSON object as `model`, or a 400 that names what is wrong (strict mode: fields not in `known`, by
    default the model's, too)."""
    reject_unknown(payload, model.model_fields if known is None else known, settings)
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise validation_error(list(error.errors())) from None


def parse_body(body: bytes, model: type[Body], settings: Settings, *, known: Collection[str] | None = None) -> Body:
    """A JSON body as `model`, or a 400 that names what is wrong."""
    return parse_payload(parse_json_object(body, settings), model, settings, known=known)
