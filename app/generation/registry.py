"""A served model's declaration (ModelSpec) and the registry of them that requests are routed by."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

OWNED_BY = "llama-responses"


class ModelConfigError(ValueError):
    """The model declarations cannot be served (a file that does not parse, a missing GGUF, two models with one
    id...): one line naming the entry, which the CLI prints before refusing to start."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model: where its weights are and how to run it. None: the deployment's default for that knob."""

    id: str
    path: Path
    #: Context window in tokens; None (or 0): the model's trained context.
    n_ctx: int | None = None
    #: Cells of the unified KV pool its sequences share (RESPONSES_KV_POOL_TOKENS); 0: a window per sequence. A
    #: prompt is held to the smaller of the pool and the context, so one that cannot fit is a 400, not an empty answer.
    kv_pool_tokens: int = 0
    #: A Jinja chat template used instead of the one the GGUF carries.
    chat_template: str | None = None
    #: 'open,close' or 'none' (see RESPONSES_REASONING_TAGS); None: detected from the template.
    reasoning_tags: str | None = None
    #: The family whose syntax its calls are read and forced in (app/generation/dialects); None: detected.
    tool_format: str | None = None
    #: Its reasoning markers: "auto" (its family's), "none", "think", or a family's name; None: "auto".
    reasoning_format: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    n_gpu_layers: int | None = None
    owned_by: str = OWNED_BY
    #: Unix time for /v1/models (the file's modification time unless declared).
    created: int = 0

    @property
    def size_bytes(self) -> int:
        """What loading it costs, roughly: the weights' file size (0 where there is no file, as with a fake)."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0


class ModelRegistry:
    """The served models by id, the default one, and aliases (other names a client may use for one of them)."""

    def __init__(
        self, models: Sequence[ModelSpec], *, default: str | None = None, aliases: Mapping[str, str] | None = None
    ) -> None:
        if not models:
            raise ModelConfigError("no models declared")
        self._models: dict[str, ModelSpec] = {}
        for spec in models:
            if spec.id in self._models:
                raise ModelConfigError(f"model '{spec.id}' is declared twice (model ids must be unique)")
            self._models[spec.id] = spec
        self._aliases: dict[str, str] = {}
        for alias, target in (aliases or {}).items():
            if alias in self._models:
                raise ModelConfigError(f"alias '{alias}' is also a model id")
            if target not in self._models:
                raise ModelConfigError(f"alias '{alias}' names model '{target}', which is not declared")
            self._aliases[alias] = target
        default_id = self._aliases.get(default, default) if default else models[0].id
        if default_id not in self._models:
            raise ModelConfigError(f"default model '{default}' is not declared")
        self.default: ModelSpec = self._models[default_id]

    def get(self, name: str) -> ModelSpec | None:
        """The model a name (an id or an alias) stands for."""
        return self._models.get(self._aliases.get(name, name))

    def resolve(self, names: Sequence[str]) -> list[str]:
        """The ids `names` (ids or aliases) stand for, each once, in order; every model's where none is named."""
        if not names:
            return self.ids
        ids: list[str] = []
        for name in names:
            spec = self.get(name)
            if spec is None:
                raise ModelConfigError(f"worker model '{name}' is not declared (served: {', '.join(self.ids)})")
            if spec.id not in ids:
                ids.append(spec.id)
        return ids

    @property
    def aliases(self) -> Mapping[str, str]:
        return dict(self._aliases)

    @property
    def ids(self) -> list[str]:
        return list(self._models)

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)
