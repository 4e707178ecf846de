"""How much of a sequence's KV cells a later prompt may reuse, and in which chunks prompts are read.

Two modes (RESPONSES_KV_REUSE):
- `all` (the default, as llama-server does): every cell is kept, those of generated tokens included, so a
  chained or resent turn prefills only its new tokens. A hit may round differently from a cold read:
  llama.cpp's CPU kernels give a token's cells slightly different values when it is decoded alone (as
  generated tokens are) than in a batch, or in a batch of another shape, and at temperature 0 an answer can
  take another path.
- `exact`: a hit gives exactly the output of a cold read, by construction. Prompts are read in chunks whose
  boundaries are fixed positions (multiples of EXACT_CHUNK), each in a llama_decode of its own, and a prompt
  reuses cells only up to such a boundary and only cells computed while reading a prompt. So every cell and
  the last chunk (whose logits pick the first token) are computed from identical inputs in identical shapes,
  hit or cold. The price: up to EXACT_CHUNK - 1 tokens re-read per hit, the previous answer always re-read,
  and prompt chunks never share a batch with other sequences' tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

KvReuseMode = Literal["all", "exact"]

#: Chunk size of exact mode's prompt reading: a hit re-reads at most 63 tokens, and on a CPU a 64-row matmul
#: already runs near full speed. bench/prefill_chunks.py prints prefill speed by chunk size against 512 (see
#: bench/README.md); on the loaded 2-core machine this was chosen on, the figures were noise.
EXACT_CHUNK = 64
#: Prompt tokens every reading sequence gets of a step's room before the rest goes to the shortest: what keeps a
#: long prompt moving while shorter ones are read beside it (see prompt_shares).
MIN_PROMPT_SHARE = 32


def prompt_shares(pending: Sequence[int], room: int, floor: int = MIN_PROMPT_SHARE) -> list[int]:
    """How many of their pending prompt tokens the sequences still reading their prompts (`pending`: each one's
    count, in slot order) read in a step with `room` places for prompt tokens.

    Each gets up to `floor` tokens first, then what is left goes to the one with the fewest pending tokens, then
    the next (shortest remaining first, as llama-server's continuous batching lets a short prompt through). So a
    short prompt admitted while a long one is being read is read whole within a step or two, where the whole room
    used to go to whichever sequence came first (a 7.6k-token prompt held a tiny one back for its whole prefill,
    issue 27). What it costs the long prompt: the short prompts' tokens in those steps (every token is read once
    either way), so its first token comes later by about their reading time, a few steps at most: a sequence
    reads its prompt once, and at most `slots - 1` others read beside it at a time. The floor keeps the long
    prompt from standing still meanwhile, however many short ones keep arriving.

    A step that reads the last of a prompt (its sequence's first token comes from it) reads no more of the other
    prompts than their floor: that first token waits for its own prefill and the decodes beside it, not for a
    full chunk of someone else's prompt (issue 27's goal: another tenant's create waits no more than one decode
    step plus its own prefill). It costs the long prompt the rest of one step's room each time a short one ends.
    """
    shares = [0] * len(pending)
    left = room
    for index, count in enumerate(pending):
        take = min(count, floor, left)
        shares[index] = take
        left -= take
    if any(share and share == count for share, count in zip(shares, pending, strict=True)):
        return shares  # a first token comes from this step: keep it short
    for index in sorted(range(len(pending)), key=lambda index: pending[index]):
        take = min(pending[index] - shares[index], left)
        shares[index] += take
        left -= take
        if take and shares[index] == pending[index]:
            break  # it reads the last of its prompt: the step stops there
    return shares


@dataclass(frozen=True, slots=True)
class KvReuse:
    mode: KvReuseMode = "all"
    #: Most tokens one llama_decode takes (the batch size).
    batch_tokens: int = 512
    chunk: int = EXACT_CHUNK

    @property
    def exact(self) -> bool:
        return self.mode == "exact"

    def usable(self, shared: int, prompt_length: int) -> int:
        """How many leading prompt tokens to reuse of `shared` held ones: never the last (its logits choose the
        first output token), and in exact mode only whole chunks."""
        reused = max(0, min(shared, prompt_length - 1))
        return reused - reused % self.chunk if self.exact else reused

    def kept(self, cells: int, prompt_length: int) -> int:
        """How many of a finished sequence's cells (prompt, then output) stay for later prompts."""
        return min(cells, prompt_length) if self.exact else cells

    def chunk_length(self, position: int, pending: int, room: int) -> int:
        """How many of `pending` prompt tokens starting at `position` to read in a batch with `room` places
        left: in exact mode up to the next chunk boundary (the batch holds nothing else)."""
        if self.exact:
            return min(pending, self.chunk - position % self.chunk)
        return min(pending, room)
