"""llama.cpp itself as a reference for tests: its sources (chat templates, example outputs) and its llama-server."""
