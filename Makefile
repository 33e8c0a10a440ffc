# Two commands do everything on a fresh Debian 12 machine:
#   make run   installs what is missing, builds wgtrain only, trains the default CPU run
#   make test  installs what is missing, builds everything, runs the whole test suite
# Other targets: setup, build (everything), bench, fixture (the anemoi test store), clean.
#   make run RUN_CONFIG=config/anemoi_fixture.yml   trains on the anemoi fixture store

BUILD_DIR ?= build
JOBS      ?= 2
RUN_CONFIG ?= config/cpu_small.yml
# anemoi runs (RUN_CONFIG=config/anemoi_fixture.yml) read stores under DATA_DIR;
# the fixture store is written there first.
DATA_DIR  ?= $(BUILD_DIR)/data
FIXTURE   := $(DATA_DIR)/anemoi-fixture.zarr
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup configure build wgtrain run test bench fixture clean

all: build

setup:
	bash scripts/setup.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

configure: setup $(BUILD_DIR)/CMakeCache.txt

# The program alone: what `make run` needs (no tests, no benchmarks).
wgtrain: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target wgtrain

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: wgtrain $(if $(findstring anemoi,$(RUN_CONFIG)),fixture)
	WG_DATA_PATH=$${WG_DATA_PATH:-$(abspath $(DATA_DIR))} ./$(BUILD_DIR)/wgtrain --config $(RUN_CONFIG) $(ARGS)

fixture: setup $(FIXTURE)/.zgroup

$(FIXTURE)/.zgroup: tests/data/make_anemoi_store.py
	mkdir -p $(DATA_DIR)
	/usr/bin/python3 tests/data/make_anemoi_store.py $(FIXTURE) --lat 16 --lon 32

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	./$(BUILD_DIR)/bench_recompute_modes $(ARGS)

clean:
	rm -rf $(BUILD_DIR)
