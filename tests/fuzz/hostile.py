"""Hostile values a schema-driven generator rarely writes (hypothesis leaves out lone surrogates, for one), put
into generated requests: the inputs that once answered 500 or poisoned a row, in any place of any body."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

#: Values that broke something once: lone surrogates, NUL, an unhashable type, integers past 32 and 64 bits,
#: floats JSON cannot hold, an id past its column, text outside ASCII, deep nesting, a URL with CR/LF (a webhook's
#: was stored and echoed raw).
HOSTILE_VALUES: list[Any] = [
    "x\ud800y",
    "\udfff",
    "a\x00b",
    {},
    [],
    [{}],
    2**31,
    2**63,
    -(2**63) - 1,
    10**400,
    float("inf"),
    float("nan"),
    "x" * 65,
    "é\u2028✓",
    json.loads("[" * 200 + "]" * 200),
    "https://example.com/hook\r\nX-Injected: 1",
]
#: Text in a path parameter: NUL, an id past its column, non-ASCII, numbers past 32 and 64 bits. (Never empty:
#: `/v1/responses/` is another route, which redirects to `/v1/responses`.)
HOSTILE_PATH_TEXT = ["a\x00b", "x" * 65, "é", str(2**31), str(2**63), "-1"]
#: Text in a query parameter: the same, or empty.
HOSTILE_QUERY_TEXT = [*HOSTILE_PATH_TEXT, ""]
#: Whole bodies no schema describes: nesting past any recursion limit, invalid UTF-8, an integer past the
#: interpreter's 4300 digits, and JSON that is not an object.
HOSTILE_BODIES = [
    '{"input": ' + "[" * 50_000 + "]" * 50_000 + "}",
    b'{"input": "\xff\xfe"}',
    '{"input": "hi", "metadata": {"k": "\\ud800"}}',
    '{"input": "hi", "n": ' + "9" * 5000 + "}",
    "[]",
    "null",
]
#: Authorization values: a key with non-ASCII bytes, and a scheme but no key.
HOSTILE_AUTHORIZATION = ["Bearer fuzz-k\u00e9y".encode(), b"Bearer ", b"Basic fuzz-key"]


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) in a JSON value, in a fixed order: where a hostile value can go."""
    found: list[tuple[Any, Any]] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            pairs: list[tuple[Any, Any]] = list(current.items())
        elif isinstance(current, list):
            pairs = list(enumerate(current))
        else:
            continue
        for key, value in pairs:
            found.append((current, key))
            stack.append(value)
    return found


def mutate_body(data: st.DataObject, body: Any, fields: list[str]) -> Any:
    """`body` (a fresh copy), with one hostile value in one place (or a new top-level field), or replaced
    whole by a hostile body."""
    if data.draw(st.integers(0, 9), label="whole body") == 0:
        return data.draw(st.sampled_from(HOSTILE_BODIES))
    slots = _slots(body)
    if isinstance(body, dict):
        slots += [(body, name) for name in fields if name not in body]
    if not slots:
        return body
    container, key = data.draw(st.sampled_from(slots), label="where")
    container[key] = data.draw(st.sampled_from(HOSTILE_VALUES), label="hostile value")
    return body
