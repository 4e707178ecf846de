#!/usr/bin/env bash
# bench.run on a CUDA GPU, on a machine with CUDA's compiler, CMake and a python but no network, from a directory
# that bench/gpu/stage.sh filled elsewhere:
#
#   bash STAGE_DIR/source/bench/gpu/run.sh STAGE_DIR [WORK_DIR] [build|bench|all]
#
# build  llama.cpp from the llama-cpp-python sdist's own sources, once, with CUDA: the shared libraries that
#        llama_cpp loads (LLAMA_CPP_LIB_PATH) and llama-server, the peer, so both sides run the same kernels; then
#        a venv that sees the carried wheels, this checkout and the given python's packages.
# bench  waits for a build in progress (one started in the background, say), unpacks the model, then runs each
#        part of `bench.run --gpu` in turn under its own deadline and rewrites the merged JSON and table after
#        each part, so that a run cut short still leaves what it measured.
# all    (the default) both.
#
# Environment: PYTHON (python3), CUDA_ARCHITECTURES (native; 90 for an H100/H200), CUDA_FLASH_ATTENTION (ON;
# OFF compiles ggml's flash-attention kernels empty, which takes about a third off the build, and then no side
# has flash attention), JOBS (nproc), OUT (WORK_DIR/results: env.txt, build.log, preflight.txt, bench.log,
# results.json, table.txt), SECTIONS (the parts, in order: stream concurrency conversations stall memory),
# SECTION_SECONDS (600 a part), DEADLINE (epoch seconds by which the bench ends; default an hour after it starts),
# BUILD_WAIT_SECONDS (3600), BENCH_ARGS (more bench.run arguments: --tokens 256, --quick), PARTS_AFTER_CRASH (0:
# the parts are left out when the preflight's llama_cpp steps fail, as each would crash the same way).
set -euo pipefail

STAGE="$(cd "${1:?usage: run.sh STAGE_DIR [WORK_DIR] [build|bench|all]}" && pwd)"
WORK="${2:-${STAGE}/work}"
PHASE="${3:-all}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-native}"
CUDA_FLASH_ATTENTION="${CUDA_FLASH_ATTENTION:-ON}"
JOBS="${JOBS:-$(nproc)}"
SECTIONS="${SECTIONS-stream concurrency conversations stall memory}"
SECTION_SECONDS="${SECTION_SECONDS:-600}"
BUILD_WAIT_SECONDS="${BUILD_WAIT_SECONDS:-3600}"
mkdir -p "${WORK}"
WORK="$(cd "${WORK}" && pwd)"
OUT="${OUT:-${WORK}/results}"
mkdir -p "${OUT}"
VENV="${WORK}/venv"
SERVER="${WORK}/build/bin/llama-server"
MODEL="${WORK}/model.gguf"
# llama_cpp loads the build's libllama; the ggml and CUDA libraries it needs come through their run paths.
export LLAMA_CPP_LIB_PATH="${WORK}/build/bin" RESPONSES_MODEL_PATH="${MODEL}" PYTHONUNBUFFERED=1
# A crash in native code leaves the Python stack that led to it in the log.
export PYTHONFAULTHANDLER=1
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="${PATH}:/usr/local/cuda/bin"
fi

# Notes and the build's log live in WORK (the bench phase may run later, with another OUT); publish() copies
# them beside the results.
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "${WORK}/env.txt" >&2; }
publish() {
  if [[ "$(cd "${OUT}" && pwd)" != "${WORK}" ]]; then
    cp -f "${WORK}/env.txt" "${WORK}/build.log" "${OUT}/" 2>/dev/null || true
  fi
}

find_first() { # find_first NAME_PATTERN DIR...: the first file of that name under those folders
  local pattern="$1"
  shift
  find -L "$@" -name "${pattern}" \( -type f -o -type l \) -print -quit 2>/dev/null || true
}

stand_ins() {
  # A toolkit assembled from pip wheels (nvcc and cudart alone) lacks cuBLAS and the driver's link stub, which
  # ggml-cuda links. Prints CMake arguments, one a line, with stand-ins for what the last configure found
  # missing (WORK/build/CMakeCache.txt): the python's own nvidia wheels (PyTorch brings cuBLAS) and the
  # driver's libcuda.so.1.
  local cache="${WORK}/build/CMakeCache.txt" roots header cublas cublas_lt driver
  mapfile -t roots < <("${PYTHON}" -c 'import site; print("\n".join(f"{p}/nvidia" for p in site.getsitepackages()))')
  roots+=(/usr/local/cuda /usr/lib/x86_64-linux-gnu /usr/lib64)
  if grep -q '^CUDA_cublas_LIBRARY:FILEPATH=.*NOTFOUND' "${cache}"; then
    header="$(find_first cublas_v2.h "${roots[@]}")"
    cublas="$(find_first 'libcublas.so*' "${roots[@]}")"
    cublas_lt="$(find_first 'libcublasLt.so*' "${roots[@]}")"
    if [[ -n "${header}" && -n "${cublas}" && -n "${cublas_lt}" ]]; then
      echo "-DCUDA_cublas_LIBRARY=${cublas}"
      echo "-DCUDA_cublasLt_LIBRARY=${cublas_lt}"
      echo "-DCMAKE_CUDA_FLAGS=-isystem ${header%/*}"
    fi
  fi
  if grep -q '^CUDA_cuda_driver_LIBRARY:FILEPATH=.*NOTFOUND' "${cache}"; then
    driver="$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')"
    driver="${driver:-$(find_first 'libcuda.so.1' /usr/local/nvidia /usr/lib/x86_64-linux-gnu /usr/lib64)}"
    # Without it, ggml's CUDA pool does without virtual memory management.
    if [[ -n "${driver}" ]]; then echo "-DCUDA_cuda_driver_LIBRARY=${driver}"; else echo "-DGGML_CUDA_NO_VMM=ON"; fi
  fi
}

configure() {
  local cpu_flags
  # The Makefile's portable CPU flags (its default LLAMA_CMAKE_ARGS): the CPU side as in a CPU build.
  cpu_flags="$(sed -n 's/^LLAMA_CMAKE_ARGS ?= //p' "${ROOT}/Makefile")"
  # ${cpu_flags} unquoted: a word a flag.
  # shellcheck disable=SC2086
  # NCCL off: ggml uses it only to split one model over several GPUs, and the first H200 run's configure found
  # a system libnccl of unknown CUDA version, loaded into every process for nothing.
  #
  # --exclude-libs: the lent machines' compiler (/opt/gcc, GCC 13.3) links libstdc++ statically, so every
  # library of the build carried a copy of it, exported (llama.cpp sets no symbol visibility). The dynamic linker
  # then mixed the copies: libllama's std::regex (its tokenizer, at every model load) ran into libggml-cuda's
  # copy of libstdc++'s locale code and crashed, in the bench's processes though not in a bare one (2026-11-26,
  # H200, native stack from cuda-gdb). Kept private, each library uses its own copy; with a shared libstdc++ the
  # flag changes nothing. -Xlinker: nvcc and g++ both pass it on.
  cmake -S "${WORK}/sdist/vendor/llama.cpp" -B "${WORK}/build" $(command -v ninja >/dev/null && echo -G Ninja) \
    -DCMAKE_BUILD_TYPE=Release ${cpu_flags} -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
    -DGGML_CUDA_FA="${CUDA_FLASH_ATTENTION}" -DGGML_CUDA_NCCL=OFF \
    -DCMAKE_SHARED_LINKER_FLAGS="-Xlinker --exclude-libs=libstdc++.a:libsupc++.a" \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF "$@"
}

build() {
  local started extras
  started=$(date +%s)
  rm -f "${WORK}/build.done" "${WORK}/build.failed"
  touch "${WORK}/build.running"
  # A failure anywhere below leaves build.failed for a bench phase that waits on this one.
  trap 'mv -f "${WORK}/build.running" "${WORK}/build.failed" 2>/dev/null || true' EXIT
  rm -rf "${WORK}/sdist" "${WORK}/build"
  mkdir -p "${WORK}/sdist"
  tar -xJf "${STAGE}"/llama_cpp_python-*-trimmed.tar.xz -C "${WORK}/sdist" --strip-components=1
  environment # first: a python that cannot make it fails in seconds, not after the compile
  log "build: the venv is ready; CUDA architectures ${CUDA_ARCHITECTURES}, ${JOBS} jobs"
  nvcc --version 2>&1 | tail -2 >"${WORK}/build.log"
  if ! configure >>"${WORK}/build.log" 2>&1; then
    mapfile -t extras < <(stand_ins)
    log "build: configured again, with stand-ins for what the toolkit lacks: ${extras[*]:-none found}"
    configure "${extras[@]}" >>"${WORK}/build.log" 2>&1
  fi
  log "build: configured, compiling"
  cmake --build "${WORK}/build" --target llama llama-server -j "${JOBS}" >>"${WORK}/build.log" 2>&1
  log "build: llama.cpp with CUDA in $(($(date +%s) - started)) s"
  libraries
  "${VENV}/bin/python" -c '
import llama_cpp

assert llama_cpp.llama_supports_gpu_offload(), "this libllama cannot offload: not a GPU build"
print("llama_cpp", llama_cpp.__version__, "from", llama_cpp.llama_cpp._base_path, "offloads to the GPU")
' 2>&1 | tee -a "${WORK}/env.txt"
  "${SERVER}" --version 2>&1 | tail -2 | tee -a "${WORK}/env.txt"
  trap - EXIT
  mv -f "${WORK}/build.running" "${WORK}/build.done"
}

libraries() {
  # Which shared libraries the build's resolve to at run time (CUDA runtime, cuBLAS, the driver, libstdc++,
  # libgomp): a crash in the first model load is first a question of what got loaded.
  {
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}; compiler $(command -v "${CXX:-g++}"), its shared libstdc++:" \
      "$("${CXX:-g++}" -print-file-name=libstdc++.so 2>&1)"
    if readelf -d "${WORK}/build/bin/libllama.so" | grep -q 'NEEDED.*libstdc++'; then
      echo "libstdc++: shared"
    else
      echo "libstdc++: static in each library; std::locale members libggml-cuda.so exports (0 wanted):" \
        "$(nm -D --defined-only "${WORK}/build/bin/libggml-cuda.so" | grep -cE ' _ZNK?St6locale' || true)"
    fi
    for library in libllama.so libggml-cuda.so; do
      echo "${library}: $(readelf -d "${WORK}/build/bin/${library}" 2>/dev/null | grep -E 'RUNPATH|RPATH' || true)"
      ldd "${WORK}/build/bin/${library}" 2>&1 | grep -vE 'linux-vdso|ld-linux' | sed 's/^/  /'
    done
  } >>"${WORK}/env.txt" 2>&1 || true
}

environment() {
  # A venv whose sys.executable sits beside a `llama-responses` command, as the bench's servers expect
  # (app/testing/servers.py). It sees, in this order: the carried wheels, this checkout, then the given python's
  # own packages (numpy and the like, which the stage leaves out).
  local inherited purelib
  inherited="$("${PYTHON}" -c 'import site; print("\n".join(site.getsitepackages()))')"
  rm -rf "${VENV}" "${WORK}/site"
  "${PYTHON}" -m venv --without-pip "${VENV}"
  "${PYTHON}" -m pip install -q --no-index --no-deps --no-compile --target "${WORK}/site" "${STAGE}"/wheels/*.whl
  # The sdist's Python package; its libraries are the build's (LLAMA_CPP_LIB_PATH), so CUDA is compiled once.
  cp -r "${WORK}/sdist/llama_cpp" "${WORK}/site/"
  purelib="$("${VENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
  printf '%s\n' "${WORK}/site" "${ROOT}" "${inherited}" >"${purelib}/bench-gpu.pth"
  printf '#!%s\nimport sys\n\nfrom app.cli import run\n\nsys.exit(run())\n' "${VENV}/bin/python" \
    >"${VENV}/bin/llama-responses"
  chmod +x "${VENV}/bin/llama-responses"
  # What the app and the bench import beside llama_cpp, whose library the build has yet to make.
  "${VENV}/bin/python" -c 'import alembic, asyncpg, diskcache, fastapi, jinja2, numpy, openai, opentelemetry, uvicorn'
}

unpack_model() {
  local expected
  expected="$(cat "${STAGE}/model.gguf.sha256")"
  if [[ -f "${MODEL}" ]] && [[ "$(sha256sum "${MODEL}" | cut -d' ' -f1)" == "${expected}" ]]; then
    return
  fi
  cat "${STAGE}"/model.gguf.xz.part-* | xz -d >"${MODEL}.partial"
  if [[ "$(sha256sum "${MODEL}.partial" | cut -d' ' -f1)" != "${expected}" ]]; then
    log "model: the pieces in ${STAGE} do not make the staged GGUF (one missing?)"
    return 1
  fi
  mv "${MODEL}.partial" "${MODEL}"
}

wait_for_build() {
  local waited=0
  while [[ -f "${WORK}/build.running" ]] && ((waited < BUILD_WAIT_SECONDS)); do
    sleep 2
    waited=$((waited + 2))
  done
  if [[ ! -f "${WORK}/build.done" ]]; then
    log "bench: no finished build in ${WORK} (the end of its build.log follows)"
    tail -40 "${WORK}/build.log" >&2 || true
    publish
    return 1
  fi
  log "bench: the build was ready after waiting ${waited} s"
}

merge() {
  publish
  if compgen -G "${WORK}/sections/*.json" >/dev/null; then
    (cd "${ROOT}" && "${VENV}/bin/python" -m bench.gpu.merge --json "${OUT}/results.json" "${WORK}"/sections/*.json \
      >"${OUT}/table.txt" 2>>"${OUT}/bench.log") || log "bench: merging the parts failed"
  fi
}

bench() {
  local deadline section limit preflight=0
  unpack_model # while the build may still run
  wait_for_build
  deadline="${DEADLINE:-$(($(date +%s) + 3600))}"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >>"${WORK}/env.txt" 2>&1 || true
  # The kernel tells the sandbox apart (4.4.0: gVisor; a real version: Firecracker), and a crash may be a stack's.
  echo "kernel $(uname -r), stack limit $(ulimit -s)" >>"${WORK}/env.txt"
  # llama_cpp and llama-server on their own first: a crash there is told apart from one in the bench.
  log "bench: preflight"
  publish
  # Straight into OUT, line by line: a call cut short still brings back what it found.
  (cd "${ROOT}" && "${VENV}/bin/python" -m bench.gpu.preflight --llama-server "${SERVER}") >"${OUT}/preflight.txt" 2>&1 ||
    preflight=$?
  publish
  if ((preflight == 2)) && [[ "${PARTS_AFTER_CRASH:-0}" != 1 ]]; then
    log "bench: llama_cpp failed in the preflight (${OUT}/preflight.txt): the parts are left out"
    publish
    return 1
  fi
  ((preflight == 0)) || log "bench: the preflight failed (${OUT}/preflight.txt); the parts run, for what they can measure"
  rm -rf "${WORK}/sections"
  mkdir -p "${WORK}/sections"
  for section in ${SECTIONS}; do
    # 15 s are kept for the last merge; a part gets what is left, up to SECTION_SECONDS. BENCH_ARGS unquoted: a
    # word an argument.
    limit=$((deadline - $(date +%s) - 15))
    limit=$((limit < SECTION_SECONDS ? limit : SECTION_SECONDS))
    if ((limit < 30)); then
      log "bench: ${section} left out, the deadline is near"
      continue
    fi
    log "bench: ${section} (at most ${limit} s)"
    (cd "${ROOT}" && timeout -k 10 "${limit}" "${VENV}/bin/python" -m bench.run --gpu --no-distributed \
      --only "${section}" --llama-server "${SERVER}" --json "${WORK}/sections/${section}.json" ${BENCH_ARGS:-}) \
      >>"${OUT}/bench.log" 2>&1 || log "bench: ${section} ended with status $?"
    merge
  done
  cat "${OUT}/table.txt" 2>/dev/null || true
}

case "${PHASE}" in
  build) build ;;
  bench) bench ;;
  all)
    build
    bench
    ;;
  *) echo "unknown phase ${PHASE}: build, bench or all" >&2 && exit 2 ;;
esac
