"""The arq worker: loads the model once and runs generation jobs (`llama-responses worker`)."""
