# cgviz: the commands the README names.
#   make demo    print a CUDA graph tree for a demo scenario
#   make test    run the tests (tests/gpu skip themselves without CUDA)
# Both create .venv on first use, install a CPU build of torch and the package.

PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

BIN := $(VENV)/bin
STAMP := $(VENV)/.cgviz-setup

.PHONY: setup system-deps demo test bench docs clean

setup: system-deps $(STAMP)

# Graphviz's `dot` draws the tree view (a built-in layout stands in without it); Debian's
# Chromium runs the browser tests (tests/browser skip without it; Playwright's own browser
# download is not used); Node runs the front end's unit tests (tests/js, no npm). Installed
# from Debian packages when missing and we may (root, apt-get).
system-deps:
	@missing=""; \
	command -v dot >/dev/null 2>&1 || missing="$$missing graphviz"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (apt-get)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null \
				|| echo "note: apt-get could not install$$missing"; \
		else \
			case "$$missing" in *graphviz*) echo "note: Graphviz 'dot' not found; the tree view uses its built-in layout (apt install graphviz)";; esac; \
			case "$$missing" in *chromium*) echo "note: /usr/bin/chromium not found; tests/browser will skip (apt install chromium)";; esac; \
			case "$$missing" in *nodejs*) echo "note: node not found; the front end's unit tests (tests/js) will skip (apt install nodejs)";; esac; \
		fi; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, and only when the venv cannot import it yet: torch==$(TORCH_VERSION)
# (a CPU wheel where pip finds one locally), else the CPU wheel index.
# Then the package itself, editable, with its test extras, what the browser tests drive
# (JupyterLab, Notebook 7, marimo, Playwright) and what builds the docs (Sphinx, MyST-NB, Furo).
$(STAMP): pyproject.toml | $(BIN)/python
	@if $(BIN)/python -c "import torch" >/dev/null 2>&1; then \
		echo "torch $$($(BIN)/python -c "import torch; print(torch.__version__)") already in $(VENV)"; \
	else \
		echo "$(BIN)/pip install torch==$(TORCH_VERSION)"; \
		$(BIN)/pip install "torch==$(TORCH_VERSION)" || { \
			echo "falling back to the CPU wheel index: $(TORCH_CPU_INDEX)"; \
			$(BIN)/pip install --index-url "$(TORCH_CPU_INDEX)" torch; \
		}; \
	fi
	$(BIN)/pip install -e ".[test,browser,docs]"
	@touch $@

demo: setup
	$(BIN)/cgviz demo --backend auto --text

# The teaching notebooks run under nbval: outputs of cells marked to be checked must match
# (addresses and durations masked by notebooks/sanitize.cfg); other cells must just run.
# Then the front end's unit tests under Node (tests/js).
# ruff first (seconds; the rules are in pyproject.toml), then the tests, then the front end's units.
test: setup
	$(BIN)/ruff check cgviz tests scripts benchmarks examples
	$(BIN)/python -m pytest -q tests notebooks --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg
	@if command -v node >/dev/null 2>&1; then node --test tests/js; \
	else echo "note: node not found: tests/js skipped (apt install nodejs)"; fi

bench: setup
	$(BIN)/python benchmarks/sim_overhead.py

# The documentation site, in docs/_build/html. Every build runs the pages' code and the teaching
# notebooks on the CPU simulation (-E: nothing kept from an earlier build, as the pictures
# follow cgviz's code); warnings, broken links and references included, fail it.
DOCS_OUT ?= docs/_build/html
docs: setup
	$(BIN)/python -m sphinx -W --keep-going -T -E -b html docs $(DOCS_OUT)
	@echo "docs: $(DOCS_OUT)/index.html"

# Removes build outputs and caches; keeps .venv (and its torch) but forgets the
# setup stamp, so the next `make setup` re-installs the package. rm -rf .venv for a full reset.
clean:
	rm -rf build dist .pytest_cache .hypothesis docs/_build docs/notebooks $(STAMP)
	rm -rf cgviz-demo.*
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name "*.egg-info" \) -type d -print -exec rm -rf {} +
