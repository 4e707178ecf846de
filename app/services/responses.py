"""Create, chain, retrieve and delete responses; the stored row is the source of truth for every read."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.db.models import ResponseRow
from app.db.repositories import responses as repository
from app.errors import InvalidRequest, ServiceUnavailable, response_not_found
from app.generation.grammars import InvalidSchema, text_format_grammar
from app.generation.prompt import Turn, build_context, call_ids
from app.generation.tool_calls import template_tool
from app.generation.types import ContextTooLong, SamplingParams
from app.ids import new_id
from app.queue.base import GenerationJob
from app.runtime import Runtime
from app.schemas.items import CALL_OUTPUT_TYPES
from app.schemas.requests import CreateResponseRequest
from app.schemas.responses import TERMINAL_STATUSES, DeletedResponse, ResponseObject, ResponseParams
from app.services.input_items import normalize_input
from app.services.snapshots import response_from_row
from app.services.streams import TERMINAL_EVENT_TYPES, relay_events
from app.services.tools import resolve_tools
from app.services.validation import resolve_model

CANCEL_WAIT_S = 10.0
CANCEL_POLL_S = 0.02
LOST_GENERATION_ERROR = {"code": "server_error", "message": "The server stopped before this response finished."}
DEFAULT_TOP_P = 1.0


def _params_of(request: CreateResponseRequest, settings: Settings) -> ResponseParams:
    """The request's parameters, with the deployment's defaults where it gives none."""
    return ResponseParams(
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens or settings.default_max_output_tokens,
        max_tool_calls=request.max_tool_calls,
        metadata=request.metadata or {},
        parallel_tool_calls=request.parallel_tool_calls if request.parallel_tool_calls is not None else True,
        prompt_cache_key=request.prompt_cache_key,
        reasoning=request.reasoning.model_dump(exclude_none=True) if request.reasoning else None,
        safety_identifier=request.safety_identifier,
        store=request.store is not False,
        background=bool(request.background),
        temperature=request.temperature if request.temperature is not None else settings.default_temperature,
        top_p=request.top_p if request.top_p is not None else DEFAULT_TOP_P,
        text=request.text.model_dump(exclude_none=True, by_alias=True)
        if request.text and request.text.format
        else {"format": {"type": "text"}},
        tool_choice=request.tool_choice or "auto",
        tools=request.tools or [],
        truncation=request.truncation or "disabled",
        user=request.user,
    )


def _grammar_for(text_format: dict[str, Any] | None) -> str | None:
    try:
        return text_format_grammar(text_format)
    except InvalidSchema as error:
        raise InvalidRequest(str(error), param="text.format.schema", code="invalid_json_schema") from None


def _check_call_outputs(history: list[Turn], items: list[dict[str, Any]]) -> None:
    known = call_ids(history, items)
    for index, item in enumerate(items):
        if item["type"] in CALL_OUTPUT_TYPES and item["call_id"] not in known:
            raise InvalidRequest(
                f"No tool call found for {item['type']} with call_id {item['call_id']}.",
                param=f"input[{index}].call_id",
                code="invalid_value",
            )


async def _load_history(session: AsyncSession, previous_id: str, tenant: str) -> tuple[list[Turn], str]:
    """The chain's turns, oldest first, and the id of its first response."""
    chain = await repository.get_chain(session, previous_id, tenant)
    if not chain:
        raise InvalidRequest(
            f"Previous response with id '{previous_id}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if chain[-1].status not in TERMINAL_STATUSES:
        raise InvalidRequest(
            f"Previous response with id '{previous_id}' is still {chain[-1].status}; "
            "chain onto it once it has finished.",
            param="previous_response_id",
            code="previous_response_not_finished",
        )
    items = await repository.get_input_items(session, [row.id for row in chain])
    return [Turn(input_items=items[row.id], output_items=row.output) for row in chain], chain[0].id


class PreparedResponse:
    """A validated create request: its Response (status queued), its input items and its job."""

    def __init__(
        self,
        response: ResponseObject,
        items: list[dict[str, Any]],
        job: GenerationJob,
        stream: bool,
        ignored_tools: list[str],
    ) -> None:
        self.response = response
        self.items = items
        self.job = job
        self.stream = stream
        #: Hosted tool types the request sent that cannot run here (named in a response header).
        self.ignored_tools = ignored_tools


async def prepare_response(request: CreateResponseRequest, tenant: str, runtime: Runtime) -> PreparedResponse:
    """Everything that can fail with a 400 happens here, before anything is stored or generated."""
    model = resolve_model(request.model, runtime.settings, runtime.model_id)
    if request.background and request.store is False:
        raise InvalidRequest("background requires store to be true.", param="background", code="invalid_value")
    tools = resolve_tools(request.tools, request.tool_choice, strict=runtime.settings.strict_tools)
    items = normalize_input(request.input)
    history: list[Turn] = []
    chain_root: str | None = None
    if request.previous_response_id is not None:
        async with runtime.sessionmaker() as session:
            history, chain_root = await _load_history(session, request.previous_response_id, tenant)
    _check_call_outputs(history, items)
    reasoning_tags = runtime.tokenizer.reasoning_tags
    # A template with tool support shows the tools its own way; otherwise the system prompt offers them.
    native_tools = runtime.tokenizer.supports_tools and bool(tools.functions)
    system, conversation = build_context(
        instructions=request.instructions,
        history=history,
        new_items=items,
        functions=() if native_tools else tools.functions,
        reasoning_tags=reasoning_tags,
    )
    # Templates read the variables they understand and ignore the others.
    template_options: dict[str, Any] = {}
    if request.reasoning and request.reasoning.effort:
        template_options["reasoning_effort"] = request.reasoning.effort
    if native_tools:
        template_options["tools"] = [template_tool(function) for function in tools.functions]
    if not conversation:
        raise InvalidRequest("The input must contain at least one message.", param="input", code="invalid_value")
    try:
        prompt = await asyncio.to_thread(
            runtime.tokenizer.render_within_context,
            system,
            conversation,
            truncate=request.truncation == "auto",
            template_options=template_options or None,
        )
    except ContextTooLong as error:
        raise InvalidRequest(str(error), param="input", code="context_length_exceeded") from None
    params = _params_of(request, runtime.settings)
    response = ResponseObject(
        **params.model_dump(),
        id=new_id("resp"),
        created_at=int(time.time()),
        status="queued",
        model=model,
        previous_response_id=request.previous_response_id,
    )
    job = GenerationJob(
        response_id=response.id,
        prompt_tokens=prompt,
        sampling=SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_output_tokens=params.max_output_tokens,
            grammar=tools.grammar or _grammar_for(params.text.get("format")),
        ),
        response=response.model_dump(mode="json"),
        store=params.store,
        keep_events=params.background and bool(request.stream),
        functions={function.name: function.namespace for function in tools.functions},
        custom_tools=[function.name for function in tools.functions if function.kind == "custom"],
        reasoning_tags=reasoning_tags,
        encrypted_reasoning="reasoning.encrypted_content" in (request.include or []),
        affinity_key=request.prompt_cache_key or chain_root or response.id,
    )
    return PreparedResponse(response, items, job, stream=bool(request.stream), ignored_tools=tools.ignored)


async def _store_new(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> None:
    response = prepared.response
    row = ResponseRow(
        id=response.id,
        tenant=tenant,
        status=response.status,
        model=response.model,
        background=response.background,
        stream=prepared.stream,
        previous_response_id=response.previous_response_id,
        params=ResponseParams.model_validate(response.model_dump()).model_dump(mode="json"),
        output=[],
        job=prepared.job.to_payload(),
        created_at=datetime.fromtimestamp(response.created_at, UTC),
    )
    async with runtime.sessionmaker() as session, session.begin():
        await repository.insert_response(session, row, prepared.items)


async def submit_response(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> None:
    """Store (when asked), commit, then enqueue: no job ever points at an uncommitted row."""
    if prepared.job.store:
        await _store_new(runtime, prepared, tenant)
    try:
        await runtime.queue.enqueue(prepared.job)
    except Exception:
        if prepared.job.store:
            # Nothing half-stored: a response whose job could not be queued would wait forever.
            with anyio.CancelScope(shield=True):
                async with runtime.sessionmaker() as session, session.begin():
                    await repository.delete_response(session, prepared.response.id, tenant)
        raise


async def open_stream(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> AsyncIterator[dict[str, Any]]:
    """Subscribe, store and enqueue (before the first event, so faults are plain HTTP errors), then relay."""
    if not prepared.response.background and not await runtime.queue.workers_alive():
        # A background job may wait in the queue for a worker; a client holding a connection should not.
        raise ServiceUnavailable("No worker is available to generate this response.", code="no_workers")
    subscription = await runtime.queue.bus.subscribe(prepared.response.id)
    try:
        await submit_response(runtime, prepared, tenant)
    except BaseException:
        await subscription.close()
        raise
    return relay_events(
        runtime,
        prepared.response.id,
        subscription,
        after=-1,
        replay=False,
        stored=prepared.job.store,
        cancel_on_exit=not prepared.response.background,
    )


async def create_response(runtime: Runtime, prepared: PreparedResponse, tenant: str) -> ResponseObject:
    """Non-streaming create: background returns at once (queued); otherwise wait for the terminal event."""
    if prepared.response.background:
        await submit_response(runtime, prepared, tenant)
        return prepared.response
    final: dict[str, Any] | None = None
    async for event in await open_stream(runtime, prepared, tenant):
        if event["type"] in TERMINAL_EVENT_TYPES:
            final = event["response"]
    if final is None:  # the terminal event was missed: the stored row has the final state
        async with runtime.sessionmaker() as session:
            return await get_response(session, prepared.response.id, tenant)
    return ResponseObject.model_validate(final)


async def stream_stored_response(
    runtime: Runtime, response_id: str, tenant: str, starting_after: int | None
) -> AsyncIterator[dict[str, Any]]:
    """GET ?stream=true: replay the stored events after `starting_after`, then follow the live ones."""
    async with runtime.sessionmaker() as session:
        row = await repository.get_response(session, response_id, tenant)
    if row is None:
        raise response_not_found(response_id)
    if not (row.background and row.stream):
        raise InvalidRequest(
            "stream=true is only available for responses created with background and stream.",
            param="stream",
            code="invalid_value",
        )
    subscription = await runtime.queue.bus.subscribe(response_id)
    after = -1 if starting_after is None else starting_after
    return relay_events(runtime, response_id, subscription, after=after, replay=True, stored=True, cancel_on_exit=False)


async def cancel_response(runtime: Runtime, response_id: str, tenant: str) -> ResponseObject:
    async with runtime.sessionmaker() as session, session.begin():
        row = await repository.get_response(session, response_id, tenant)
        if row is None:
            raise response_not_found(response_id)
        if not row.background:
            raise InvalidRequest("Cannot cancel a synchronous response.", param="response_id", code="invalid_value")
        if row.status in ("completed", "failed", "incomplete"):
            raise InvalidRequest(f"Cannot cancel a {row.status} response.", param="response_id", code="invalid_value")
        if row.status == "queued":
            # Never started: cancelled here, and the worker that takes the job finds it is no longer queued.
            await repository.transition(session, response_id, from_statuses=("queued",), values={"status": "cancelled"})
    await runtime.queue.cancel(response_id)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while True:
        async with runtime.sessionmaker() as session, session.begin():
            row = await repository.get_response(session, response_id, tenant)
            if row is None:
                raise response_not_found(response_id)
            if row.status in TERMINAL_STATUSES:
                return response_from_row(row)
            if time.monotonic() > deadline:
                # The worker did not answer (it may be gone): stop waiting; a late finish cannot overwrite this.
                await repository.transition(
                    session, response_id, from_statuses=("in_progress",), values={"status": "cancelled"}
                )
                continue
        await asyncio.sleep(CANCEL_POLL_S)


async def get_response(session: AsyncSession, response_id: str, tenant: str) -> ResponseObject:
    row = await repository.get_response(session, response_id, tenant)
    if row is None:
        raise response_not_found(response_id)
    return response_from_row(row)


async def delete_response(session: AsyncSession, response_id: str, tenant: str) -> DeletedResponse:
    if not await repository.delete_response(session, response_id, tenant):
        raise response_not_found(response_id)
    return DeletedResponse(id=response_id)


async def fail_unfinished_responses(runtime: Runtime) -> int:
    """Embedded mode at start-up: responses a previous run left generating can never finish; say so."""
    async with runtime.sessionmaker() as session, session.begin():
        return await repository.fail_unfinished(session, error=LOST_GENERATION_ERROR)
