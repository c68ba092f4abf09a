# `make run` and `make test` set up .venv with a Python >= 3.12 they find, then run.
# PySide6 6.12 on Python 3.11 aborts after a few hundred signal emits, hence >= 3.12.

# On Linux the entry points load Debian's OpenBLAS themselves when it is installed (dspark.blas):
# mlx[cpu] links a slow reference BLAS.

# Debian/Ubuntu packages the app needs beyond its wheels: OpenBLAS (issue #12's walkthrough
# measured the bundled demo at 0.7x speculative vs plain without it on a fresh machine, 2.2x with it); Qt's xcb
# platform plugin and what it links (since Qt 6.5 it aborts without libxcb-cursor0: "xcb-cursor0
# or libxcb-cursor0 is needed", exit 134); GL, fonts, D-Bus. From ldd of PySide6 6.12's libqxcb.so.
SYSTEM_PACKAGES := libopenblas0-pthread libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 \
	libxcb-randr0 libxcb-render0 libxcb-render-util0 libxcb-shape0 libxcb-shm0 libxcb-sync1 libxcb-util1 \
	libxcb-xfixes0 libxcb-xkb1 libxcb1 libx11-6 libx11-xcb1 libxkbcommon0 libxkbcommon-x11-0 libegl1 libgl1 \
	libfontconfig1 libglib2.0-0 libdbus-1-3 fonts-dejavu-core

VENV := .venv

PYTHON ?= $(shell for c in python3.12 python3.13 $$HOME/.pyenv/versions/3.12*/bin/python3 $$HOME/.pyenv/versions/3.13*/bin/python3 python3; do \
	$$c -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo $$c; break; }; done)

PEERS := .venv-peers

# The format owners' reference code (transformers' Gemma-4 assistant, speculators) runs on torch,
# whose CPU build here is for Python 3.11 (tests/reference/requirements.txt).
REF := .venv-ref
REF_PYTHON ?= $(shell for c in python3.11 $$HOME/.pyenv/versions/3.11*/bin/python3; do \
	$$c -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null && { echo $$c; break; }; done)

.PHONY: run test lint setup peers reference demo bundle clean system-packages

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python >= 3.12 not found: install python3.12 or python3.13"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e ".[test]"
	touch $@

setup: $(VENV)/.installed $(VENV)/.system-packages

# Once per environment (make system-packages checks again): installs what is missing when it can
# (Debian/Ubuntu, as root), else prints the one command to run; does nothing without dpkg (macOS,
# other Linux). Never fails the build.
$(VENV)/.system-packages:
	@$(MAKE) -s system-packages
	@mkdir -p $(VENV) && touch $@

system-packages:
	@command -v dpkg-query >/dev/null 2>&1 || exit 0; \
	missing=""; for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	[ -n "$$missing" ] || exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing system packages:$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null 2>&1 \
	  || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	       --no-install-recommends $$missing >/dev/null 2>&1; } \
	  || echo "could not install them; run: apt-get install$$missing"; \
	else echo "DSpark Studio needs these system packages; run: sudo apt-get install$$missing"; fi

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

# A third, test-only environment: the format owners' torch code (tests/reference/). Tests that
# need it say so and are skipped where it is missing, with the reason.
$(REF)/.installed: tests/reference/requirements.txt tests/reference/no-deps.txt
	@test -n "$(REF_PYTHON)" || { echo "Python 3.11 not found: the reference tests need it (pyenv install 3.11)"; exit 1; }
	$(REF_PYTHON) -m venv $(REF)
	$(REF)/bin/pip install -q --upgrade pip
	$(REF)/bin/pip install -q -r tests/reference/requirements.txt
	$(REF)/bin/pip install -q --no-deps -r tests/reference/no-deps.txt
	touch $@

reference: $(REF)/.installed

run: setup
	$(VENV)/bin/dspark-studio $(ARGS)

# Two workers (pytest-xdist), a test module to each at a time, so that a module's fixtures are built
# once: most tests drive tiny models from Python on one core. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: setup peers reference lint
	QT_QPA_PLATFORM=offscreen PYTHONFAULTHANDLER=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider \
	  -n $(TEST_WORKERS) --dist loadscope --durations=15 $(ARGS)

# ruff's formatter and its rules (pyproject.toml, [tool.ruff]) over the whole tree, before the
# tests: a line out of form is found in a second rather than after the suite. `ruff format .`
# and `ruff check --fix .` in .venv mend most of what it finds.
lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

demo: setup
	$(VENV)/bin/dspark make-demo $(ARGS)

# The app, built in its own venv with PyInstaller, then a copy of it started as a person's machine
# would. Linux: the one-folder bundle dist/dspark-studio/, started from / in a bare environment with
# --self-test. macOS: dist/DSpark Studio.app, unzipped from its zip, checked with codesign and
# plutil, self-tested in a bare environment and through LaunchServices (packaging/README.md), on
# Metal; SELFTEST_DEVICE=cpu self-tests on MLX's CPU device instead, for a Mac whose GPU does not
# run MLX (CI's probe decides: packaging/probe_metal.sh).
UNAME ?= $(shell uname -s)
SELFTEST_DEVICE ?= gpu
bundle:
ifeq ($(UNAME),Darwin)
	PYTHON=$(PYTHON) packaging/build_macos.sh
	SELFTEST_DEVICE=$(SELFTEST_DEVICE) packaging/test_app_macos.sh dist/DSpark-Studio-macOS.zip
else
	PYTHON=$(PYTHON) packaging/build_linux.sh
	packaging/test_bundle.sh dist/dspark-studio/dspark-studio
endif

clean:
	rm -rf $(VENV) $(PEERS) $(REF) *.egg-info build dist
