# `make run` and `make test` set up .venv with a Python >= 3.12 they find, then run.
# PySide6 6.12 on Python 3.11 aborts after a few hundred signal emits, hence >= 3.12.

# On Linux the entry points load Debian's OpenBLAS themselves when it is installed (dspark.blas):
# mlx[cpu] links a slow reference BLAS.

VENV := .venv

PYTHON ?= $(shell for c in python3.12 python3.13 $$HOME/.pyenv/versions/3.12*/bin/python3 $$HOME/.pyenv/versions/3.13*/bin/python3 python3; do \
	$$c -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo $$c; break; }; done)

PEERS := .venv-peers

.PHONY: run test setup peers demo bundle clean

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python >= 3.12 not found: install python3.12 or python3.13"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e ".[test]"
	touch $@

setup: $(VENV)/.installed

# A second, test-only environment with the peer packages (z-lab dflash, mlx-dspark, mlx-vlm) on
# the project's own mlx / mlx-lm versions: the formats tests run them as references. They are
# never installed into .venv.
$(PEERS)/.installed: tests/peers/requirements.txt $(VENV)/.installed
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install -q --upgrade pip
	$(PEERS)/bin/pip install -q $$($(VENV)/bin/pip freeze | grep -iE '^(mlx|mlx-cpu|mlx-metal|mlx-lm|numpy|transformers|tokenizers|huggingface[-_]hub|safetensors|jinja2|pyyaml|protobuf|sentencepiece)==')
	$(PEERS)/bin/pip install -q --no-deps -r tests/peers/requirements.txt
	touch $@

peers: $(PEERS)/.installed

run: setup
	$(VENV)/bin/dspark-studio $(ARGS)

test: setup peers
	QT_QPA_PLATFORM=offscreen PYTHONFAULTHANDLER=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider $(ARGS)

demo: setup
	$(VENV)/bin/dspark make-demo $(ARGS)

# The Linux one-folder bundle (dist/dspark-studio/, built in its own venv with PyInstaller), then
# a copy of it started as a person's machine would: from /, bare environment, --self-test.
bundle:
	PYTHON=$(PYTHON) packaging/build_linux.sh
	packaging/test_bundle.sh dist/dspark-studio/dspark-studio

clean:
	rm -rf $(VENV) $(PEERS) *.egg-info build dist
