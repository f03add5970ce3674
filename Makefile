# make demo / make test / make bench / make compat each build .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= test,bench,lightning,notebook

.PHONY: demo test bench compat venv clean

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: it is the CPU wheel on this machine; a bare `torch` would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/fluxfs demo

test: $(VENV)/.installed
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) -m bench all --profile cloud --json-dir bench/results
	$(PY) -m bench.report

# gcsfs's own test suite with gcsfs and with FluxFileSystem against `fluxfs serve`: fails on a test that
# passes with gcsfs, fails with fluxfs and is not in the allow file. gcsfs's tests are fetched from GitHub
# (offline: GCSFS_TESTS_TARBALL=path.tar.gz, see compat/run_gcsfs_suite.sh).
compat: $(VENV)/.installed
	PYTHON=$(PY) bash compat/run_gcsfs_suite.sh tests/compat/gcsfs_allow.txt

clean:
	rm -rf $(VENV) build dist *.egg-info
