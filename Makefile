# Two commands do everything: `make serve` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.test-stamp
comma := ,
EXTRAS ?=
EXTRAS_STAMP := $(VENV)/.extras-$(subst $(comma),-,$(EXTRAS))
TEST_EXTRAS := dev,embeddings,audio,vision,tts-convert,native
ARGS ?=

.PHONY: install native serve test lint check bench clean

# What serving needs: the package (text models) plus nanobind for worker/cpu/native's build;
# `make serve EXTRAS=audio,vision,embeddings` adds the extras other kinds of models need. Nothing uses
# apt-get or npm; ensure-blas.sh --check only says whether a system OpenBLAS will be preloaded.
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[native]'
	sh deploy/ensure-blas.sh --check
	touch $(STAMP)

$(EXTRAS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS),native]'
	touch $(EXTRAS_STAMP)

# The test world on top: test libraries, OpenBLAS, Chromium and espeak-ng (apt-get where allowed),
# the reference venv, the agent CLIs (npm) and the real tokenizer files.
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[$(TEST_EXTRAS)]'
	sh deploy/ensure-blas.sh
	sh deploy/ensure-test-browser.sh
	sh deploy/ensure-audio-tools.sh
	PYTHON=$(PY) sh deploy/ensure-reference-venv.sh $(VENV)/refs
	sh deploy/ensure-agent-clis.sh $(VENV)/agent-clis
	PYTHON=$(BIN)/python sh deploy/ensure-tokenizer-files.sh $(VENV)/tokenizer-files
	touch $(TEST_STAMP)

install: $(TEST_STAMP) native

# worker/cpu/native's MLX extensions (an FMA softmax and few-row products in OpenBLAS's order, for
# MLX's CPU build); skipped with one line where they cannot be built (then MLX's own ops run).
# Up-to-date builds are skipped.
native: $(STAMP)
	$(BIN)/python -m worker.cpu.native.build

serve: $(STAMP) $(if $(EXTRAS),$(EXTRAS_STAMP)) native
	$(BIN)/rapid-mlx serve $(ARGS)

# The test process runs MLX too: preload the same optimized BLAS the workers use (worker/cpu/blas.py).
test: $(TEST_STAMP) native
	sh deploy/ensure-agent-clis.sh $(VENV)/agent-clis
	PYTHON=$(BIN)/python sh deploy/ensure-real-weights.sh $(VENV)/real-weights
	PYTHON=$(BIN)/python sh deploy/ensure-speech-weights.sh $(VENV)/speech-weights
	LD_PRELOAD="$$($(BIN)/python -m worker.cpu.blas)" $(BIN)/python -m pytest -q -ra --durations=25

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

check: lint test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
