# The two commands of the README. Each installs what it needs first.
#   make run    builds and runs caf-run on the embedded default config
#   make test   builds and runs every test suite (ctest)
BUILD ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps build run test unit clean

all: build

deps:
	@./scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DEGRESS_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/caf-run --config-file=config/default.ini

test: build
	cd $(BUILD) && ctest --output-on-failure $(CTEST_ARGS)

unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

clean:
	rm -rf $(BUILD)
