# oslens: `make` builds everything into .venv; `make demo` records and reports a real workload;
# `make test` sets up, builds and runs every test. See README.md.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
VENV := .venv
PY := $(VENV)/bin/python
CARGO_OUT := target/release
DEMO_TRACE := traces/demo

.PHONY: all setup build native python workloads wheel demo test test-rust test-python bench clean

all: build

setup:
	@bash scripts/setup.sh

build: setup native python workloads

native:
	PYO3_PYTHON=$(abspath $(PY)) cargo build --release --workspace --quiet
	@mkdir -p $(VENV)/lib/pkgconfig $(VENV)/include
	install -m 755 $(CARGO_OUT)/liboslens.so $(VENV)/lib/liboslens.so
	install -m 644 $(CARGO_OUT)/liboslens.a $(VENV)/lib/liboslens.a
	install -m 644 crates/recorder/include/oslens.h $(VENV)/include/oslens.h
	gfortran -O2 -fPIC -c crates/recorder/fortran/oslens.f90 -J $(VENV)/include -o target/oslens_fortran.o
	ar rcs $(VENV)/lib/liboslens_fortran.a target/oslens_fortran.o
	@for bin in $(CARGO_OUT)/oslens-*; do [ -x "$$bin" ] && [ -f "$$bin" ] && install -m 755 "$$bin" $(VENV)/bin/ || true; done
	install -m 755 $(CARGO_OUT)/liboslens_native.so python/oslens/_native.abi3.so
	install -m 755 $(CARGO_OUT)/liboslens_oracle.so python/oslens_testing/_oracle.abi3.so
	@sed -e 's|@PREFIX@|$(abspath $(VENV))|' crates/recorder/oslens.pc.in > $(VENV)/lib/pkgconfig/oslens.pc

python:
	@$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . >/dev/null
	@mkdir -p $(VENV)/share/man/man1 $(VENV)/share/bash-completion/completions $(VENV)/share/zsh/site-functions
	@$(VENV)/bin/oslens completion man > $(VENV)/share/man/man1/oslens.1
	@$(VENV)/bin/oslens completion bash > $(VENV)/share/bash-completion/completions/oslens
	@$(VENV)/bin/oslens completion zsh > $(VENV)/share/zsh/site-functions/_oslens
	@# the calibration program, compiled once here: an import's quick calibration then need not compile it
	@mkdir -p $(VENV)/lib/oslens && $(PY) -c 'from oslens.calibrate import invitro; invitro.build(invitro.prebuilt().parent)'

workloads: native
	@for d in workloads/*/ osbench/; do if [ -f "$$d/Makefile" ]; then $(MAKE) -s -C "$$d" OSLENS_PREFIX=$(abspath $(VENV)) || exit 1; fi; done

# the wheel users install (README.md), from what `build` made: dist/oslens-*.whl
wheel: build
	$(PY) scripts/wheel.py --out dist

demo: build
	@rm -rf $(DEMO_TRACE)
	$(VENV)/bin/oslens record -o $(DEMO_TRACE) -- workloads/water/water --threads 2 --steps 4
	$(VENV)/bin/oslens report $(DEMO_TRACE)

test: build
	cargo test --release --workspace --quiet
	$(VENV)/bin/python -m pytest -q

bench: build
	@for b in bench/*/run.py; do echo "== $$b"; $(PY) "$$b" || exit 1; done

clean:
	cargo clean
	rm -rf $(VENV) traces dist python/oslens/_native.abi3.so python/oslens_testing/_oracle.abi3.so
