# Tilewright: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench fuzz fpga docs clean

# Long regressions: make fuzz N=2000 CONFIG=small [SEED=0]
N      ?= 1000
CONFIG ?= tiny
SEED   ?= 0

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(STAMP)
	$(VENV)/bin/tilewright demo

# Both cores (pytest-xdist); build caches take a file lock per entry, so workers never build one twice.
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal

bench: $(STAMP)
	$(PY) benchmarks/fsim_matmul.py
	$(PY) benchmarks/compile_resnet.py
	$(PY) benchmarks/rtl_throughput.py --config small
	$(PY) benchmarks/rtl_throughput.py --config default
	$(VENV)/bin/tilewright bench resnet18 --backend rtl --config default --json benchmarks/results/resnet18_rtl.json \
		--plot benchmarks/results/resnet18_rtl.png --roofline benchmarks/results/resnet18_roofline.png \
		--trace benchmarks/results/resnet18_rtl_trace.json
	$(PY) benchmarks/model_resnet18.py --rtl --json benchmarks/results/resnet18_model.json
	$(PY) benchmarks/onnx_node_tests.py
	$(PY) benchmarks/tuning.py
	$(PY) benchmarks/tuning_runners.py
	$(PY) benchmarks/tuning_resnet18.py

# ... and the fault-injection suite with 10 times its programs (TW_FAULT_SCALE), on every preset.
fuzz: $(STAMP)
	$(VENV)/bin/tilewright fuzz --config $(CONFIG) -n $(N) --seed $(SEED)
	TW_FAULT_SCALE=10 $(PY) -m pytest -q -n auto tests/hw/test_faults.py

# Every board at its preset (minutes to an hour each: place-and-route is single-threaded WASM), and the
# 85F's `slim` at 100 MHz and `medium` at 75 by seed sweeps, then the table, recorded in docs/fpga_reports/ and docs/fpga.md.
fpga: $(STAMP)
	for board in ulx3s-85f ulx3s-45f icebreaker tangnano9k; do \
		$(VENV)/bin/tilewright fpga build --board $$board --link-test || true; \
		$(VENV)/bin/tilewright fpga build --board $$board || true; done
	$(VENV)/bin/tilewright fpga build --board ulx3s-85f --freq 100 --seed 1 2 3 4 5 6 --until-met || true
	$(VENV)/bin/tilewright fpga build --board ulx3s-85f --config medium --freq 75 --seed 1 2 3 4 5 6 --until-met || true
	$(VENV)/bin/tilewright fpga report --record
	$(VENV)/bin/tilewright docs

docs: $(STAMP)
	$(VENV)/bin/tilewright docs

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis benchmarks/results
