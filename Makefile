# Two entry points for a fresh clone: `make quickstart` and `make test`.
# Both create .venv with python3 -m venv when it is missing and install into it the exact versions
# of requirements.lock (checked against its hashes), then the project itself, editable.
# `make lock` refreshes the lock after pyproject.toml changes (see the README).
VENV   := .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := requirements.lock
UV     := uv==0.13.9
# The lock is for CPU Linux x86_64 under Python 3.11, with the `test` and `view` extras included.
LOCK_TARGET := --extra test --extra view --python-version 3.11 --python-platform x86_64-manylinux_2_28

.PHONY: help quickstart serve notebook tensorboard test test-fast bench device-wheels device-site \
	device-bench device-bounds device-data device-frontier device-steps lint format clean lock \
	lock-upgrade

# `make` alone lists the targets; it builds nothing.
help:
	@echo "make quickstart    train and compare the two quickstart models (runs/quickstart)"
	@echo "make serve         translate with them, attention shown, at http://127.0.0.1:8000/"
	@echo "make notebook      Jupyter on notebooks/ (they read, or train, runs/quickstart)"
	@echo "make tensorboard   TensorBoard on every run under runs/ (LOGDIR=DIR for others)"
	@echo "make test          the whole suite, as CI runs it (17-24 minutes on 2 cores)"
	@echo "make test-fast     lint and the quick tests (about 2 minutes)"
	@echo "make bench         every CPU benchmark on the small configs (a few minutes)"
	@echo "make lint          ruff's checks and formatting; make format fixes what it can"
	@echo "make lock          refresh requirements.lock after pyproject.toml changes"
	@echo "                   (make lock-upgrade: every package to its newest allowed)"
	@echo "make clean         delete the tests' caches (runs/ and the commands' ~/.cache/seq2seq are kept)"
	@echo "make device-wheels, device-data    prepare a GPU machine's packages and corpus;"
	@echo "make device-bench, device-bounds, device-steps, device-frontier    run there"
	@echo "                   (device-site installs the packages; docs/benchmarks.md)"
	@echo "quickstart, serve, notebook, tensorboard, test, bench and lint first create .venv."

$(STAMP): pyproject.toml $(LOCK)
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PYTHON) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# Keeps every pin that pyproject.toml still allows; lock-upgrade moves all to the newest allowed.
lock:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet "$(UV)"
	$(VENV)/bin/uv pip compile pyproject.toml $(LOCK_TARGET) --generate-hashes \
		--custom-compile-command "make lock" --quiet -o $(LOCK) $(UPGRADE)

lock-upgrade:
	$(MAKE) lock UPGRADE=--upgrade

quickstart: $(STAMP)
	$(PYTHON) -m seq2seq.compare --suite quickstart --workdir runs/quickstart

# The quickstart's two models side by side, with their attention, at http://127.0.0.1:8000/
# (seq2seq/serve; SERVE_FLAGS adds flags, e.g. SERVE_FLAGS="--checkpoint best --port 8080").
QUICKSTART_RUNS := runs/quickstart/quickstart_transformer runs/quickstart/quickstart_rnnsearch
serve: $(STAMP)
	@for run in $(QUICKSTART_RUNS); do test -f $$run/config.json || { echo "error: no run at \
	$$run; make quickstart trains it (make serve serves the quickstart's runs)" >&2; exit 1; }; done
	$(PYTHON) -m seq2seq.serve $(addprefix --workdir ,$(QUICKSTART_RUNS)) $(SERVE_FLAGS)

# Jupyter and TensorBoard come from the lock's `view` extra. NOTEBOOK_FLAGS and TENSORBOARD_FLAGS
# add flags (e.g. NOTEBOOK_FLAGS=--no-browser, TENSORBOARD_FLAGS="--port 6007 --bind_all").
# As root (a container) Jupyter refuses to start without --allow-root.
notebook: $(STAMP)
	$(VENV)/bin/jupyter notebook notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root) \
		$(NOTEBOOK_FLAGS)

LOGDIR := runs
tensorboard: $(STAMP)
	@test -d "$(LOGDIR)" || { echo "error: no folder $(LOGDIR); make quickstart trains runs \
	into runs/ (LOGDIR=DIR reads another folder of runs)" >&2; exit 1; }
	$(VENV)/bin/tensorboard --logdir "$(LOGDIR)" $(TENSORBOARD_FLAGS)

# Lint first: a ruff error or an unformatted file fails the suite (and CI, which runs this).
# One worker per core (at most 4), each taking whole files in the order collected (files with
# slow tests first, tests/conftest.py), so that a file's module fixtures (a trained run, a
# comparison) are built once. Most of the suite (compiling, tracing) keeps one core busy at a
# time; two workers keep both busy. The 15 slowest tests are listed at the end.
test: $(STAMP) lint
	$(PYTHON) -m pytest --numprocesses auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder \
		--durations 15

# Before each commit (docs/testing.md): lint, then the tests not marked slow, leaving out the
# files that train runs, start commands in processes or compile whole models (FAST_SKIPS).
FAST_SKIPS := fused_attention multiprocess budget bench bench_profile bench_corpus device_bench \
	evaluation notebooks notebook_helpers mesh scaling frontier checkpoints provenance compare \
	compare_fairness tuning early_stopping translation_options export compute_dtype \
	compilation_cache resume end_to_end same_run_on_any_mesh cli_errors models training decoding \
	rnnsearch rnnsearch_scan serve real_loop step_alone devices
test-fast: $(STAMP) lint
	$(PYTHON) -m pytest -m "not slow" --numprocesses auto --maxprocesses 4 --dist loadfile \
		$(foreach f,$(FAST_SKIPS),--ignore=tests/test_$(f).py) --durations 10

# Every benchmark (matmul peak, training step, beam search, input pipeline) on
# configs/bench_small.py and configs/bench_small_rnnsearch.py, in one process; prints the figures
# beside their targets (the measured runs: docs/benchmarks.md). A few minutes on 2 CPU cores.
bench: $(STAMP)
	$(PYTHON) -m seq2seq.bench all

# The paper configs on an accelerator (seq2seq/bench/device.py; docs/benchmarks.md, "On an
# accelerator"). Its image has JAX for its GPU but no internet: `make device-wheels`, run where
# pip can download, saves the lock's versions of the packages the image lacks as wheels for its
# Python in .whl/; `make device-bench`, run there, installs them beside the image's packages and
# runs the parts in order while $(DEVICE_MINUTES) minutes last, writing device_bench.json and .md
# to $(DEVICE_OUT). Issue 41's eleven come first; issue 55's two, last, may find no time left:
# `make device-bounds` runs them alone.
DEVICE_WHEELS := grain array-record portpicker sacremoses ml-collections tensorboardx
DEVICE_PYTHON ?= python3
DEVICE_SITE   ?= /tmp/seq2seq-site
DEVICE_OUT    ?= $(if $(OUT),$(OUT),device-bench)
DEVICE_MINUTES ?= 9
DEVICE_PARTS  ?=# comma-separated names of seq2seq/bench/device.py's parts; empty: all of them
WHEEL_PLATFORM := --python-version 3.12 --implementation cp --only-binary=:all: \
	$(foreach n,28 27 24 17,--platform manylinux_2_$(n)_x86_64) --platform manylinux2014_x86_64

device-wheels: $(STAMP)
	$(PYTHON) -m pip download --quiet --no-deps $(WHEEL_PLATFORM) -d .whl \
		$(foreach p,$(DEVICE_WHEELS),$(shell grep -i -m1 '^$(p)==' $(LOCK) | cut -d' ' -f1))

device-site:
	$(DEVICE_PYTHON) -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
		--upgrade --target $(DEVICE_SITE) .whl/*.whl

device-bench: device-site
	PYTHONPATH=$(CURDIR):$(DEVICE_SITE) $(DEVICE_PYTHON) -m seq2seq.bench.device --out $(DEVICE_OUT) \
		--minutes $(DEVICE_MINUTES) --parts=$(DEVICE_PARTS)

# Issue 55's items 4 and 5 alone (docs/benchmarks.md, "The host and the recurrence on an
# accelerator"): train.py's loop for Transformer-base against its step alone, then RNNsearch-50's
# step against a loop's launch floor by batch, length and scan unroll; about 7 minutes, all in
# $(DEVICE_OUT). Needs data/multi30k (`make device-data`) beside .whl/.
BOUNDS_MINUTES ?= 7.5
device-bounds: device-site
	PYTHONPATH=$(CURDIR):$(DEVICE_SITE) $(DEVICE_PYTHON) -m seq2seq.bench.device --out $(DEVICE_OUT) \
		--minutes $(BOUNDS_MINUTES) --parts=real_loop_base,rnnsearch_bound

# Each frontier row's training step with the accelerator to itself, on its own batches
# (seq2seq/bench/step_alone.py; docs/benchmarks.md, "The frontier on an accelerator"): what runs
# sharing the device cannot give. About 2 minutes; needs data/multi30k like device-frontier.
# Rows after the first start only within $(STEPS_BUDGET_S) seconds (0: no limit), so that the
# frontier after it in the same call keeps its minutes; the rows the verdict needs come first.
STEPS_ROWS ?= transformer-small,rnnsearch-medium,transformer-medium
STEPS_BUDGET_S ?= 100
STEPS_FLAGS ?=# more flags, e.g. --batches=64
device-steps: device-site
	PYTHONPATH=$(CURDIR):$(DEVICE_SITE) $(DEVICE_PYTHON) -m seq2seq.bench.step_alone \
		--rows=$(STEPS_ROWS) --budget_s=$(STEPS_BUDGET_S) --out=$(DEVICE_OUT) $(STEPS_FLAGS)

# The Multi30k frontier's chosen sizes trained end to end on an accelerator, 2 seeds each, all
# at once (seq2seq/bench/device_frontier.py; docs/benchmarks.md, "The frontier on an
# accelerator"). `make device-data`, run here, copies Multi30k's German and English files into
# data/multi30k (ignored by git: the device tool carries it); `make device-frontier`, run there,
# installs .whl/ as device-bench does and trains, scores and packs every run within
# $(FRONTIER_MINUTES) minutes: records.tar.gz, logs.tar.gz and device_frontier.json/.md in $(DEVICE_OUT).
MULTI30K_SHARED ?= ../shared/data/multi30k
FRONTIER_MINUTES ?= 7.5
FRONTIER_FLAGS ?=# more flags, e.g. --seeds=3 --concurrent=2
device-data:
	mkdir -p data/multi30k
	install -m 644 $(foreach s,train val test_2016_flickr,$(foreach l,de en,$(MULTI30K_SHARED)/$(s).$(l))) \
		data/multi30k/

device-frontier: device-site
	PYTHONPATH=$(CURDIR):$(DEVICE_SITE) $(DEVICE_PYTHON) -m seq2seq.bench.device_frontier \
		--out $(DEVICE_OUT) --minutes $(FRONTIER_MINUTES) $(FRONTIER_FLAGS)

lint: $(STAMP)
	$(PYTHON) -m ruff check . && $(PYTHON) -m ruff format --check .

format: $(STAMP)
	$(PYTHON) -m ruff format . && $(PYTHON) -m ruff check --fix .

# Caches only: runs/ holds trained models (hours of work), which a clean never deletes.
clean:
	rm -rf .pytest_cache .jax_cache
