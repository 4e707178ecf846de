"""llama-responses: a stateful OpenAI Responses API server on llama.cpp."""
