"""KV cells: how much of a prompt earlier cells may serve (reuse.py), saved states (prefix_cache.py), the engine's
sequences and their cells (slots.py), and the pool they share (pool.py)."""
