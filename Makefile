# The two commands of the README. Each installs what it needs first.
#   make run    builds, then runs three real proxy VMs on a local host
#               stand-in (build/local-run); where VMs cannot run here, caf-run
#               on the embedded default config (libvirt's test driver)
#   make test   builds and runs every test suite (ctest)
BUILD ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps build appliance run run-default cluster-run test unit soak deb bench clean

all: build

deps:
	@./scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DEGRESS_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The proxy appliance (Debian kernel + busybox/tinyproxy initramfs), cached
# in $(BUILD)/appliance. Without apt it cannot be fetched: the e2e suite then
# skips and `make run` falls back to the default, each saying why.
appliance: deps
	@./scripts/appliance/build $(BUILD)/appliance || \
	  echo "make: the proxy appliance could not be built (see above)" >&2

# BOOT=initramfs boots the proxies from the initramfs alone (default: disk,
# a qcow2 overlay per proxy on the cached appliance disk).
BOOT ?= disk
run: build appliance
	$(BUILD)/local-run --boot=$(BOOT)

run-default: build
	$(BUILD)/caf-run --config-file=config/default.ini

# Three nodes and an etcd sharing three hosts; a node killed and taken over
# (root; docs/architecture.md, "Node failover").
cluster-run: build
	$(BUILD)/cluster-run

test: build appliance
	cd $(BUILD) && ctest --output-on-failure $(CTEST_ARGS)

# The chaos soak (root): SOAK_ARGS="--hosts 4 --proxies 60 --minutes 30 --seed 7".
SOAK_ARGS ?= --minutes 5
soak: build appliance
	$(BUILD)/soak $(SOAK_ARGS)

# The Debian package from this build tree, into $(BUILD)/deb (debhelper).
deb: build
	@./scripts/make-deb $(BUILD)

# Every benchmark into $(BUILD)/bench-report: tables, CSV, gnuplot plots and
# an index.html (scripts/bench; root).
bench: build appliance
	@./scripts/bench $(BUILD)

unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

clean:
	rm -rf $(BUILD)
