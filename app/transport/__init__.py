"""How jobs travel: the protocols (base.py), the in-process backend of embedded mode, and the arq/Redis backend of
distributed mode with its event bus. It imports no job code: the executor is handed to it."""
