"""POST /v1/responses/input_tokens: the prompt a create with the same body would read, counted, not generated."""

from __future__ import annotations

from app.runtime import Runtime
from app.schemas.requests import CreateResponseRequest
from app.schemas.responses import InputTokenCount
from app.services.preparation import render_context


async def count_input_tokens(request: CreateResponseRequest, tenant: str, runtime: Runtime) -> InputTokenCount:
    """Exactly the `usage.input_tokens` of a create with the same body: the same context, rendered the same way."""
    context = await render_context(request, tenant, runtime)
    return InputTokenCount(input_tokens=len(context.prompt))
