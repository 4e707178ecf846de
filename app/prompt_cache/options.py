"""`prompt_cache_options` on a create, as the SDK's PromptCacheOptions param, and its echo on the Response.

- `prewarm: true` turns the create into a warm-up (`generate: false`): its context is read into the model's KV
  cache and kept in the prefix cache, and its Response has no output.
- `ttl` (`30m`, the default, or `12h`) is echoed; the prefix cache keeps states by bytes (LRU), see docs.
- `mode: "explicit"` with no `prompt_cache_breakpoint` (this server reads none) means, as the SDK says, that the
  request does not use the prompt cache: its prompt is read cold.
- `comparison_response_id` asks for `prompt_cache_diagnostics` (diagnosis.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

#: As long as a stored id can be (app/schemas/items.py: MAX_ID_CHARS).
MAX_COMPARISON_ID_CHARS = 64


class PromptCacheOptions(BaseModel):
    # Unknown fields are a 400 naming prompt_cache_options.<field>: a misspelt option must not pass silently.
    model_config = ConfigDict(extra="forbid")

    prewarm: StrictBool = False
    ttl: Literal["30m", "12h"] = "30m"
    mode: Literal["implicit", "explicit"] = "implicit"
    comparison_response_id: str | None = Field(None, min_length=1, max_length=MAX_COMPARISON_ID_CHARS)

    @property
    def reads_cache(self) -> bool:
        """Whether the prompt may reuse cached KV state: not in explicit mode (no breakpoint is ever set here)."""
        return self.mode == "implicit"

    def echo(self) -> dict[str, Any]:
        """The Response's `prompt_cache_options` (the SDK's: mode, ttl, comparison_response_id; not prewarm)."""
        return {"mode": self.mode, "ttl": self.ttl, "comparison_response_id": self.comparison_response_id}
