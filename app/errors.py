"""One ApiError root, each error OpenAI's `{"error": {message, type, param, code}}` with its HTTP status; what an
outage looks like (a 503 rather than a 500); a pydantic failure as one 400. The HTTP handlers are in app/api/errors."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError


class ApiError(Exception):
    status_code = 400
    error_type = "invalid_request_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        #: HTTP headers sent with the error (Retry-After on a 429).
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(ApiError):
    """400: the request is malformed or asks for something we cannot do."""


class Unauthorized(ApiError):
    status_code = 401
    error_type = "authentication_error"


class PermissionDenied(ApiError):
    """403: the key is valid but its role may not do this (a `read` key writing, a `member` key on /metrics)."""

    status_code = 403


class NotFound(ApiError):
    status_code = 404


class Conflict(ApiError):
    """409: the request conflicts with an earlier one (an Idempotency-Key sent with another body, or still in use)."""

    status_code = 409


class RequestTooLarge(ApiError):
    """413: the body is over the server's limit (refused before it is read in full)."""

    status_code = 413


class HeadersTooLarge(ApiError):
    """431: the request line and headers are over the server's limit (refused before the request is parsed)."""

    status_code = 431


class RateLimited(ApiError):
    """429: the tenant has too many requests in flight, or has spent its requests per minute; `Retry-After` says
    when to try again."""

    status_code = 429
    error_type = "requests"


class TokensRateLimited(RateLimited):
    """429: the tenant has spent its tokens per minute (OpenAI's `type` for it is `tokens`)."""

    error_type = "tokens"


class QuotaExceeded(ApiError):
    """429: the tenant has spent a quota (its stored bytes); no Retry-After: waiting frees nothing, deleting does.
    OpenAI answers a spent quota with this type and code."""

    status_code = 429
    error_type = "insufficient_quota"


class ClientGone(ApiError):
    """499 (nginx's "client closed request"): the client disconnected before its answer was ready. Nobody reads
    it; the access log and the metrics do."""

    status_code = 499

    def __init__(self) -> None:
        super().__init__("The client closed the connection before the response was ready.", code="client_closed")


class ServerError(ApiError):
    """500: our own fault, said in a sentence (never for bad input); also where a handler cannot reach the HTTP
    error handlers, as in WebSocket mode."""

    status_code = 500
    error_type = "server_error"


class ServiceUnavailable(ApiError):
    status_code = 503
    error_type = "server_error"


def database_unavailable() -> ServiceUnavailable:
    return ServiceUnavailable("The database is unavailable; try again shortly.", code="database_unavailable")


def response_not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


#: SQLSTATE classes of a database that is (re)starting, stopping or unreachable: 08 connection exception,
#: 53 insufficient resources (too many connections), 57 operator intervention (cannot_connect_now, admin_shutdown).
OUTAGE_SQLSTATE_CLASSES = ("08", "53", "57")


def _causes(error: BaseException) -> list[BaseException]:
    """The error, what it wraps (DBAPIError.orig, __cause__, __context__) and an exception group's members."""
    seen: list[BaseException] = []
    pending = [error]
    while pending and len(seen) < 32:
        current = pending.pop()
        if any(current is known for known in seen):
            continue
        seen.append(current)
        pending.extend(
            linked
            for linked in (getattr(current, "orig", None), current.__cause__, current.__context__)
            if isinstance(linked, BaseException)
        )
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
    return seen


def is_outage(error: BaseException) -> bool:
    """Whether `error` means a backing service (database, Redis) is down or restarting, not a bug: a 503."""
    for cause in _causes(error):
        if isinstance(cause, OSError | RedisConnectionError | RedisTimeoutError | PoolTimeoutError):
            return True
        if isinstance(cause, OperationalError | InterfaceError):
            return True
        if isinstance(cause, DBAPIError) and cause.connection_invalidated:
            return True
        sqlstate = getattr(cause, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in OUTAGE_SQLSTATE_CLASSES:
            return True
    return False


def outage_error(error: BaseException) -> ServiceUnavailable | None:
    """The 503 that an outage stands for (None when `error` is not one), the same for HTTP and WebSocket mode."""
    if not is_outage(error):
        return None
    causes = _causes(error)
    if any(isinstance(cause, RedisConnectionError | RedisTimeoutError) for cause in causes):
        return ServiceUnavailable("The job queue is unavailable; try again shortly.", code="queue_unavailable")
    if any(isinstance(cause, DBAPIError | PoolTimeoutError) for cause in causes):
        return database_unavailable()
    return ServiceUnavailable("A backing service is unavailable; try again shortly.", code="unavailable")


def _param_from_location(location: tuple[Any, ...]) -> str | None:
    """Turn pydantic's loc into an OpenAI param path: ('body', 'input', 0, 'role') -> input[0].role."""
    parts = [part for part in location if part not in ("body", "query", "path", "header")]
    # Union members appear in the location as tags ("kind:message") or types ("list[...]"); they are
    # not part of the user's path.
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(part, str) and (":" in part or "[" in part):
            continue
        else:
            path += f".{part}" if path else str(part)
    return path or None


def validation_error(errors: list[Any]) -> InvalidRequest:
    """One 400 from the first pydantic error, in OpenAI's words where they differ from pydantic's."""
    first = errors[0]
    param = _param_from_location(tuple(first.get("loc", ())))
    kind = first.get("type", "")
    if kind == "missing":
        return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    if kind == "extra_forbidden":
        return InvalidRequest(f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")
    if kind == "json_invalid":
        return InvalidRequest(
            "We could not parse the JSON body of your request. The body must be a valid JSON object.",
            code="invalid_json",
        )
    message = str(first.get("msg", "Invalid value"))
    message = message.removeprefix("Value error, ")
    return InvalidRequest(f"Invalid value for '{param}': {message}", param=param, code="invalid_value")
