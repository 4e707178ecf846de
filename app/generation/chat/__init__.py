"""Chat templates rendered as llama-server `--jinja` renders them: the template's environment, what it can render
(its capabilities), the messages adapted as llama.cpp adapts them, its variables from a request, and text that is
never read as control tokens."""
