# Two commands do everything (see README):
#   make demo   create .venv, install, index docs/ into the embedded Chroma store and ask a question
#   make test   create .venv, install, run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of torch; on a GPU machine run: make TORCH_SPEC=torch install
TORCH_SPEC ?= torch==2.13.0
STORE ?= .selfrag/store
QUESTION ?= How does Self-RAG decide whether to retrieve passages?
PYTEST_ARGS ?=

.PHONY: install demo test bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test]" "$(TORCH_SPEC)"
	touch $@

install: $(BIN)/.installed

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/selfrag index docs --store $(STORE)
	HF_HUB_OFFLINE=1 $(BIN)/selfrag ask "$(QUESTION)" --store $(STORE)

test: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	$(BIN)/python benchmarks/critique_speed.py

clean:
	rm -rf $(VENV) .selfrag .pytest_cache
