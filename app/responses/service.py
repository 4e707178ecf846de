"""A create, step by step: the request checked as a whole, its context built and rendered (compacted first when it
passes its `context_management` threshold: the only step that may generate before the create is stored), then
prepared, stored and run. Input token counts take the same steps up to the stored row, so that they count exactly
what a create with the same body would read and refuse what it refuses."""

from __future__ import annotations

from app.generation.job import JobClass
from app.prompt_cache.diagnosis import Compared, Fingerprint
from app.responses import repository
from app.responses.compaction import compact_context
from app.responses.context import ConnectionChain, gather_context, render_prompt
from app.responses.preparation import PreparedResponse, RenderedContext, check_combination, prepare_response
from app.responses.schemas import CreateResponseRequest, InputTokenCount
from app.runtime import Runtime


async def render_context(
    request: CreateResponseRequest, tenant: str, runtime: Runtime, *, connection: ConnectionChain | None = None
) -> RenderedContext:
    """Tools, input, history -> the prompt tokens, after an automatic compaction when the request asks for one
    and the context passes its threshold. `connection`: a WebSocket connection's unstored last response."""
    context = await gather_context(request, tenant, runtime, connection=connection)
    prompt = await render_prompt(runtime, context)
    if prompt is None:
        prompt, item = await compact_context(runtime, context, tenant)
        return RenderedContext(context, prompt, [item])
    return RenderedContext(context, prompt)


async def find_compared(
    request: CreateResponseRequest, tenant: str, runtime: Runtime, kept: ConnectionChain | None
) -> Compared | None:
    """The response prompt_cache_options.comparison_response_id names (None: none named): an unstored response a
    WebSocket connection keeps (`kept`), else a stored one of the tenant."""
    options = request.prompt_cache_options
    if options is None or options.comparison_response_id is None:
        return None
    wanted = options.comparison_response_id
    if kept is not None and kept.response_id == wanted:
        return Compared(True, kept.fingerprint)
    async with runtime.database.read() as session:
        found, payload = await repository.get_prompt_cache_fingerprint(session, wanted, tenant)
    return Compared(found, Fingerprint.from_payload(payload) if payload is not None else None)


async def prepare(
    request: CreateResponseRequest,
    tenant: str,
    runtime: Runtime,
    *,
    connection: ConnectionChain | None = None,
    comparable: ConnectionChain | None = None,
    response_id: str | None = None,
    job_class: JobClass | None = None,
    generate: bool = True,
    keep_events: bool = False,
) -> PreparedResponse:
    """Everything that can fail with a 400 happens here, before the response is stored. `connection`: the
    unstored response a WebSocket create continues; `comparable`: the one its prompt_cache_options compare with
    (both kept by the connection). `response_id`: the id
    fixed beforehand (a batch line's, so that the line runs once); default: a new one. `job_class`: "batch" for a
    batch line (it waits behind every other job); default: by the request. `generate`: False for a warm-up (the
    prompt read into the model's cache, no output). `keep_events`: store its events even in the foreground (a
    create with an Idempotency-Key)."""
    check_combination(request)
    rendered = await render_context(request, tenant, runtime, connection=connection)
    compared = await find_compared(request, tenant, runtime, comparable)
    return await prepare_response(
        request,
        rendered,
        tenant,
        runtime.settings,
        response_id=response_id,
        job_class=job_class,
        generate=generate,
        compared=compared,
        keep_events=keep_events,
    )


async def count_input_tokens(request: CreateResponseRequest, tenant: str, runtime: Runtime) -> InputTokenCount:
    """Exactly the `usage.input_tokens` of a create with the same body, prepared as that create is (so every 400
    it answers, its output grammar's included, is answered here too); nothing is stored or generated."""
    prepared = await prepare(request, tenant, runtime)
    return InputTokenCount(input_tokens=len(prepared.job.prompt_tokens))
