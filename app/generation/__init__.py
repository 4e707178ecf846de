"""Generation: items -> prompt, the chat tokenizer and the llama.cpp engine (the only code importing llama_cpp)."""
