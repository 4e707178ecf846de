"""The handlers that render every error as OpenAI's `{"error": {message, type, param, code}}`: an ApiError as
itself, FastAPI's validation as our 400, an outage as a 503, anything else as a 500 that says nothing more."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import ApiError, outage_error, validation_error
from app.observability.metrics import REDIS_ERRORS

logger = logging.getLogger(__name__)


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers or None)


def _server_error(error: Exception) -> JSONResponse:
    logger.exception("unhandled error", exc_info=error)
    body = {
        "error": {"message": "The server had an error.", "type": "server_error", "param": None, "code": "server_error"}
    }
    return JSONResponse(body, status_code=500)


def _unavailable_or_server_error(error: Exception) -> JSONResponse:
    unavailable = outage_error(error)
    if unavailable is None:
        return _server_error(error)
    if unavailable.code == "queue_unavailable":
        REDIS_ERRORS.inc()
    logger.warning("a backing service is unavailable: %s", error)
    return error_response(unavailable)


def register_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(list(error.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, error: StarletteHTTPException) -> JSONResponse:
        status = error.status_code
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": str(error.detail), "type": kind, "param": None, "code": None}}
        return JSONResponse(body, status_code=status)

    # An outage can surface wrapped (a pool timeout, asyncpg's CannotConnectNowError, an exception group).
    @app.exception_handler(DBAPIError)
    @app.exception_handler(RedisConnectionError)
    @app.exception_handler(RedisTimeoutError)
    @app.exception_handler(OSError)
    @app.exception_handler(Exception)
    async def _unexpected(_: Request, error: Exception) -> JSONResponse:
        return _unavailable_or_server_error(error)
