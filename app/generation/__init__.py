"""Generation: items -> prompt, the chat tokenizer, the llama.cpp engine (the only code importing llama_cpp), its
runners and model pool, the served-model registry, and the GenerationJob every layer hands on."""
