"""Compaction: the model summarises a context into one sealed compaction item, through the normal generation
path (runs.py: in distributed mode a worker writes it). Serves POST /v1/responses/compact, and the creates whose
`context_management` asks for it once their context passes its threshold (compact_context, a step of its own
before the create is prepared)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.errors import InvalidRequest, ServerError
from app.generation.chat.template import TemplateRenderError
from app.generation.job import GenerationJob
from app.generation.prompt import COMPACTION_SUMMARY, ChatMessage, Turn, build_context, is_user_message
from app.generation.registry import ModelSpec
from app.generation.types import ContextTooLong, SamplingParams
from app.ids import new_id
from app.items.compaction import compaction_item, open_compactions, open_history
from app.items.normalization import normalize_input
from app.items.references import resolve_references
from app.responses.context import (
    Context,
    load_history,
    render_messages,
    renderer_for,
    resolve_model,
    template_refusal,
)
from app.responses.runs import run_to_final
from app.responses.schemas import COMPACT_NOT_IMPLEMENTED, CompactedResponse, CompactRequest
from app.runtime import Runtime
from app.schemas.responses import ResponseObject, Usage

COMPACTION_REQUEST = (
    "Summarize the conversation so far for whoever continues it: what the user wants, what has been done and "
    "found (tool calls and their results too), what was decided, and what is still open. Be concise and keep "
    "names, numbers and identifiers exact. Write only the summary."
)


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    usage: Usage


async def summarize(
    runtime: Runtime,
    *,
    system: ChatMessage | None,
    messages: Sequence[ChatMessage],
    template_options: Mapping[str, Any] | None,
    model: ModelSpec,
    tenant: str,
    affinity_key: str | None,
) -> Summary:
    """Ask the model for a summary of `messages`; the prompt starts as the context did, so its prefix is
    reused, and ends with the request to summarise. The oldest messages go if it does not fit."""
    renderer = await renderer_for(runtime, model)
    try:
        prompt = await asyncio.to_thread(
            renderer.render_within_context,
            system,
            [*messages, ChatMessage("user", COMPACTION_REQUEST)],
            truncate=True,
            template_options=template_options,
        )
    except ContextTooLong as error:
        raise InvalidRequest(str(error), param="input", code="context_length_exceeded") from None
    except TemplateRenderError as error:
        raise template_refusal(model.id, error, system, list(messages)) from None
    max_output_tokens = runtime.settings.compaction_max_output_tokens
    snapshot = ResponseObject(
        id=new_id("resp"),
        created_at=int(time.time()),
        status="queued",
        model=model.id,
        store=False,
        temperature=0.0,
        max_output_tokens=max_output_tokens,
    )
    job = GenerationJob(
        response_id=snapshot.id,
        prompt_tokens=prompt,
        sampling=SamplingParams(temperature=0.0, top_p=1.0, max_output_tokens=max_output_tokens),
        response=snapshot.model_dump(mode="json"),
        store=False,
        keep_events=False,
        tenant=tenant,
        model=model.id,
        affinity_key=affinity_key or snapshot.id,
    )
    final = await run_to_final(runtime, job)
    if final.status not in ("completed", "incomplete") or final.usage is None:
        raise ServerError("The model could not write the compaction summary.", code="compaction_failed")
    return Summary(final.output_text.strip(), final.usage)


def summary_as_read(item: dict[str, Any], summary: str) -> dict[str, Any]:
    """A new compaction item as the model reads it (what open_compactions makes of a stored one)."""
    return {"type": COMPACTION_SUMMARY, "id": item["id"], "summary": summary}


async def compact_context(
    runtime: Runtime, context: Context, tenant: str
) -> tuple[list[int], dict[str, Any], dict[str, Any]]:
    """A create whose context passed its compaction threshold: the model summarises the context first, and the
    prompt is the context with that summary in its place. (prompt tokens, the compaction item that leads the
    response's output, that item as the model read it)"""
    system, messages = await context.messages_off_loop()
    summary = await summarize(
        runtime,
        system=system,
        messages=messages,
        template_options=context.template_options,
        model=context.model,
        tenant=tenant,
        affinity_key=context.affinity_key,
    )
    item = compaction_item(runtime.sealer, tenant, summary.text, model=context.model.id)
    read = summary_as_read(item, summary.text)
    summarized = await context.messages_off_loop([read])
    try:
        prompt = await render_messages(runtime, context, *summarized)
    except ContextTooLong as error:
        raise InvalidRequest(str(error), param="input", code="context_length_exceeded") from None
    return prompt, item, read


def _check_supported(request: CompactRequest) -> None:
    for field in COMPACT_NOT_IMPLEMENTED:
        if getattr(request, field) is not None:
            raise InvalidRequest(
                f"'{field}' is not supported by this server yet.", param=field, code="unsupported_parameter"
            )
    if request.model is None:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    if request.input is None and request.previous_response_id is None:
        raise InvalidRequest(
            "Give the context to compact as 'input', 'previous_response_id', or both.",
            param="input",
            code="missing_required_parameter",
        )


async def compact(runtime: Runtime, request: CompactRequest, tenant: str) -> CompactedResponse:
    """POST /v1/responses/compact: the context's user messages, then one compaction item for the rest."""
    _check_supported(request)
    model = resolve_model(request.model, runtime.models, runtime.settings)
    items = normalize_input(request.input) if request.input is not None else []
    await resolve_references(runtime.database, items, tenant, param="input")
    history: list[Turn] = []
    chain_root = None
    if request.previous_response_id is not None:
        async with runtime.database.read() as session:
            history, chain_root = await load_history(session, request.previous_response_id, tenant)
    readable_history = open_history(runtime.sealer, tenant, history, "previous_response_id")
    readable_items = open_compactions(runtime.sealer, tenant, items, lambda index: f"input[{index}].encrypted_content")
    renderer = await renderer_for(runtime, model)
    system, messages = build_context(
        instructions=request.instructions,
        history=readable_history,
        new_items=readable_items,
        reasoning_tags=renderer.reasoning_tags,
        structured=renderer.structured,
    )
    if not messages:
        raise InvalidRequest("There is nothing to compact.", param="input", code="invalid_value")
    summary = await summarize(
        runtime,
        system=system,
        messages=messages,
        template_options=None,
        model=model,
        tenant=tenant,
        affinity_key=request.prompt_cache_key or chain_root,
    )
    context = [item for turn in history for item in (*turn.input_items, *turn.output_items)] + items
    kept: list[Any] = [item for item in context if is_user_message(item)]
    output = [*kept, compaction_item(runtime.sealer, tenant, summary.text, model=model.id)]
    return CompactedResponse.model_validate(
        {
            "id": new_id("resp"),
            "created_at": int(time.time()),
            "output": output,
            "usage": summary.usage,
        }
    )
