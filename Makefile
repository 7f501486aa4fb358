# Two commands do everything on a fresh machine:
#   make demo   create .venv, install rnnport, run the demo on the bundled example
#   make test   create .venv, install the test frameworks, lint, type-check and run every
#               test; when `chromium` is missing it installs Debian's package with apt-get
#               (sudo unless root), saying so first: a headless browser renders the
#               `rnnport explain --html` pages in one test; the suite builds the docs site and
#               runs every code block of its pages and of this README
#   make docs   build the documentation site into site/ (strict: a warning, such as a broken
#               link, fails it)
# While developing: make test-fast (lint, types, and the suite without the `slow` tests).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
REFERENCE := ../shared/examples/keras_cudnn_reference.json
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-fast lint typecheck docs golden bench fuzz clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.base: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.test: pyproject.toml requirements-test.txt tests/js/package-lock.json | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e . -r requirements-test.txt
	npm ci --prefix tests/js --silent --no-audit --no-fund
	command -v chromium >/dev/null || { \
	  echo "make test: installing Debian's chromium package (apt-get$(if $(SUDO), through sudo)):" \
	       "a headless browser renders the rnnport explain --html pages in one test"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }
	touch $@ $(VENV)/.base

demo: $(VENV)/.base
	$(PY) -m rnnport demo $(if $(wildcard $(REFERENCE)),--reference $(REFERENCE))
	@echo "rnnport is installed in $(VENV): run $(VENV)/bin/rnnport --help, or activate the" \
	      "environment with '. $(VENV)/bin/activate' and run rnnport --help"

# The suite runs in parallel (pytest-xdist), one worker per core up to 4; TEST_JOBS=1 runs it
# in one process. The 20 slowest tests are listed at the end.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

test: lint typecheck
	$(PY) -m pytest -n $(TEST_JOBS) --durations=20

# The quick loop: leaves out the tests marked slow (the long fuzz pass, live framework checks).
test-fast: lint typecheck
	$(PY) -m pytest -n $(TEST_JOBS) -m "not slow"

# The site: docs/ and the pages tools/docs_pages.py generates from the code (one per format,
# the conversion matrix, the command line, explain's pictures). No network needed.
docs: $(VENV)/.test
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

lint: $(VENV)/.test
	$(PY) -m ruff check src tests tools examples bench

typecheck: $(VENV)/.test
	$(PY) -m mypy

# Speed against PyTorch and ONNX Runtime in one run; JSON results go to bench/results/.
bench: $(VENV)/.test
	$(PY) bench/bench.py $(BENCH_ARGS)

# Mutated golden files against every file reader; failing inputs are kept in fuzz-failures/.
FUZZ_SECONDS ?= 600
fuzz: $(VENV)/.test
	$(PY) tools/fuzz.py --seconds $(FUZZ_SECONDS) --jobs 2 --keep fuzz-failures $(FUZZ_ARGS)

golden: $(VENV)/.test
	$(PY) tools/make_golden.py
	$(PY) tools/golden_tf2.py
	$(PY) tools/golden_keras3.py
	$(PY) tools/golden_tflite.py
	$(PY) tools/golden_tflite_keras3.py
	$(PY) tools/golden_jax.py
	$(PY) tools/golden_onnx.py
	$(PY) tools/golden_torch_files.py
	$(PY) tools/golden_ncnn.py
	$(PY) tools/golden_openvino.py
	$(PY) tools/golden_paddle.py
	$(PY) tools/golden_tfjs.py
	$(PY) tools/golden_keras1.py
	$(PY) tools/golden_coreml.py

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info .pytest_cache .hypothesis
