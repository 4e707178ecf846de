"""Generation jobs: one interface, an in-process backend (embedded mode) and, later, arq/Redis."""
