# make demo / make test / make bench / make compat each build .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= torch,test,bench,peers,lightning,notebook
# torch comes first, from pip's default index unless TORCH_INDEX names another (e.g. torch's CPU-only index).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: demo test test-quick lint bench compat notebook notebook-outputs venv clean

$(VENV)/.installed: setup.py setup.cfg pyproject.toml constraints.txt
	@echo "==> [1/4] creating the virtualenv $(VENV) (first run only; the steps below take about 3 minutes)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [2/4] upgrading pip"
	$(PY) -m pip install -q --upgrade pip
	@echo "==> [3/4] installing $(TORCH) from $(or $(TORCH_INDEX),pip's default index) (the largest download)"
	# torch first, pinned: it is the CPU wheel on this machine; elsewhere pip's default may be a multi-GB CUDA build.
	$(PY) -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH)
	@echo "==> [4/4] installing fluxfs and its extras ($(EXTRAS)), pinned by constraints.txt"
	$(PY) -m pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	@echo "==> $(VENV) is ready"
	touch $@

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	@echo "==> running the demo (fluxfs demo): embedded server, dataset, training, checkpoint, gcsfs comparison"
	$(VENV)/bin/fluxfs demo

# Most tests wait on a server's simulated latency, a subprocess or a stall, not on a core: TEST_WORKERS pytest
# processes (pytest-xdist, each with its own servers) overlap those waits. Then the tests marked `alone`
# (a Ctrl-C must stop a command within a second: ALONE in tests/conftest.py) run by themselves.
TEST_WORKERS ?= 4
PARALLEL = -n $(TEST_WORKERS) --dist worksteal
ALONE_FILES = $$($(PY) -c "from tests.conftest import ALONE; print(*sorted({e.split('::')[0] for e in ALONE}))")

test: $(VENV)/.installed
	@echo "==> running the test suite (pytest, $(TEST_WORKERS) workers) against the embedded server and fake-gcs-server"
	$(PY) -m pytest -q $(PARALLEL) -m "not alone"
	$(PY) -m pytest -q -m alone $(ALONE_FILES)

# The edit-test loop: every test but those marked slow (subprocesses, venvs, process groups, the notebook,
# the demo; see SLOW in tests/conftest.py), in under 3 minutes. `make test` stays the full suite.
test-quick: $(VENV)/.installed
	@echo "==> running the quick tests (pytest -m 'not slow'); make test runs them all"
	$(PY) -m pytest -q $(PARALLEL) -m "not slow and not alone"
	$(PY) -m pytest -q -m "alone and not slow" $(ALONE_FILES)

# ruff with the rules in pyproject.toml ([tool.ruff]); `make test` runs it too (tests/test_lint.py).
lint: $(VENV)/.installed
	$(PY) -m ruff check .

bench: $(VENV)/.installed
	$(PY) -m bench all --profile cloud --json-dir bench/results
	$(PY) -m bench.report

# gcsfs's own test suite with gcsfs and with FluxFileSystem against `fluxfs serve`: fails on a test that
# passes with gcsfs, fails with fluxfs and is not in the allow file. gcsfs's tests are fetched from GitHub
# (offline: GCSFS_TESTS_TARBALL=path.tar.gz, see compat/run_gcsfs_suite.sh).
compat: $(VENV)/.installed
	PYTHON=$(PY) bash compat/run_gcsfs_suite.sh tests/compat/gcsfs_allow.txt

# Jupyter (JupyterLab or the classic notebook) if installed in $(VENV), else the notebook executed to HTML.
notebook: $(VENV)/.installed
	@if $(PY) -c "import jupyterlab" 2>/dev/null; then \
		echo "==> starting JupyterLab on notebooks/explore.ipynb (Ctrl-C stops it)"; \
		$(VENV)/bin/jupyter lab notebooks/explore.ipynb; \
	elif $(PY) -c "import notebook" 2>/dev/null; then \
		echo "==> starting Jupyter on notebooks/explore.ipynb (Ctrl-C stops it)"; \
		$(VENV)/bin/jupyter notebook notebooks/explore.ipynb; \
	else \
		echo "==> Jupyter is not installed ($(PY) -m pip install jupyterlab): executing the notebook to notebooks/explore.html"; \
		$(VENV)/bin/jupyter nbconvert --to html --execute notebooks/explore.ipynb --output-dir notebooks && \
		echo "==> open notebooks/explore.html in a browser"; \
	fi

# After editing the notebook: run it and store its outputs in the file (tests/test_notebook.py checks them).
notebook-outputs: $(VENV)/.installed
	@echo "==> executing notebooks/explore.ipynb and storing its outputs in it"
	nice $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace notebooks/explore.ipynb

clean:
	rm -rf $(VENV) build dist *.egg-info
