# Two commands do everything: `make serve` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=

.PHONY: install native serve test lint check bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,embeddings,audio,vision,tts-convert]'
	sh deploy/ensure-blas.sh
	sh deploy/ensure-test-browser.sh
	sh deploy/ensure-audio-tools.sh
	PYTHON=$(PY) sh deploy/ensure-reference-venv.sh $(VENV)/refs
	sh deploy/ensure-agent-clis.sh $(VENV)/agent-clis
	PYTHON=$(BIN)/python sh deploy/ensure-tokenizer-files.sh $(VENV)/tokenizer-files
	touch $(STAMP)

install: $(STAMP) native

# worker/cpu/native's MLX extensions (an FMA softmax and few-row products in OpenBLAS's order, for
# MLX's CPU build); skipped with one line where they cannot be built (then MLX's own ops run).
# Up-to-date builds are skipped.
native: $(STAMP)
	$(BIN)/python -m worker.cpu.native.build

serve: $(STAMP) native
	$(BIN)/rapid-mlx serve $(ARGS)

# The test process runs MLX too: preload the same optimized BLAS the workers use (worker/cpu/blas.py).
test: $(STAMP) native
	sh deploy/ensure-agent-clis.sh $(VENV)/agent-clis
	PYTHON=$(BIN)/python sh deploy/ensure-speech-weights.sh $(VENV)/speech-weights
	LD_PRELOAD="$$($(BIN)/python -m worker.cpu.blas)" $(BIN)/python -m pytest -q -ra --durations=25

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

check: lint test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
