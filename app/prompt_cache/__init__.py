"""Prompt-cache options (`prompt_cache_options`) and diagnostics (`prompt_cache_diagnostics`)."""
