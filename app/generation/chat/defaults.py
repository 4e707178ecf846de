"""The chat template a model gets when its GGUF carries none (a base model, Gemma 3 270M's): the turn markup of its
architecture where we know it and its vocabulary has the markers as tokens of their own, else ChatML. Either way
the load logs a warning: the model was not trained on a chat format, and a models file's `chat_template` is the
operator's way to choose one (docs/operating/templates.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: Gemma's turns, as its instruction-tuned models' own template writes them: no system role (a system or developer
#: message opens the first user turn), `model` for the assistant.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(prefix='') %}"
    "{% for message in messages %}"
    "{% if message['role'] in ['system', 'developer'] %}{% set ns.prefix = ns.prefix + message['content'] + '\n\n' %}"
    "{% else %}<start_of_turn>{{ 'model' if message['role'] == 'assistant' else 'user' }}\n"
    "{{ ns.prefix }}{{ message['content'] | trim }}<end_of_turn>\n{% set ns.prefix = '' %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


@dataclass(frozen=True, slots=True)
class DefaultTemplate:
    name: str
    source: str
    #: The markers that must each be one token of the vocabulary for the template to be chosen.
    markers: tuple[str, ...]


#: By GGUF architecture (`general.architecture`), before ChatML.
BY_ARCHITECTURE = {
    arch: DefaultTemplate("gemma", GEMMA_TEMPLATE, ("<start_of_turn>", "<end_of_turn>"))
    for arch in ("gemma", "gemma2", "gemma3", "gemma3n")
}
CHATML = DefaultTemplate("chatml", CHATML_TEMPLATE, ())


def default_template(architecture: str, single_token: Callable[[str], bool], model: str = "") -> DefaultTemplate:
    """The template for a model whose GGUF has none (`single_token`: whether a text is one special token of its
    vocabulary), with a warning that says which one it got."""
    chosen = BY_ARCHITECTURE.get(architecture, CHATML)
    if not all(single_token(marker) for marker in chosen.markers):
        chosen = CHATML
    logger.warning(
        "model %s has no chat template in its GGUF: prompts are rendered with the %s default (a base model may "
        "not follow it; set chat_template in a models file to choose)",
        model or architecture,
        chosen.name,
    )
    return chosen
