# `make run` and `make test` set up .venv with a Python >= 3.12 they find, then run.
# PySide6 6.12 on Python 3.11 aborts after a few hundred signal emits, hence >= 3.12.

# On Linux the entry points load Debian's OpenBLAS themselves when it is installed (dspark.blas):
# mlx[cpu] links a slow reference BLAS.

VENV := .venv

PYTHON ?= $(shell for c in python3.12 python3.13 $$HOME/.pyenv/versions/3.12*/bin/python3 $$HOME/.pyenv/versions/3.13*/bin/python3 python3; do \
	$$c -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo $$c; break; }; done)

.PHONY: run test setup demo clean

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python >= 3.12 not found: install python3.12 or python3.13"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e ".[test]"
	touch $@

setup: $(VENV)/.installed

run: setup
	$(VENV)/bin/dspark-studio $(ARGS)

test: setup
	QT_QPA_PLATFORM=offscreen PYTHONFAULTHANDLER=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider $(ARGS)

demo: setup
	$(VENV)/bin/dspark make-demo $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info
