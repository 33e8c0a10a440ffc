# Two commands do everything on a fresh Debian 12 machine:
#   make run   installs what is missing, builds, trains the default CPU run
#   make test  installs what is missing, builds, runs the whole test suite
# Other targets: setup, build, bench, fixture (the anemoi test store), clean.
#   make run RUN_CONFIG=config/anemoi_fixture.yml   trains on the anemoi fixture store

BUILD_DIR ?= build
JOBS      ?= 2
RUN_CONFIG ?= config/cpu_small.yml
# anemoi runs (RUN_CONFIG=config/anemoi_fixture.yml) read stores under DATA_DIR;
# the fixture store is written there first.
DATA_DIR  ?= $(BUILD_DIR)/data
FIXTURE   := $(DATA_DIR)/anemoi-fixture.zarr
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup build run test bench fixture clean

all: build

setup:
	bash scripts/setup.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

build: setup $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build $(if $(findstring anemoi,$(RUN_CONFIG)),fixture)
	WG_DATA_PATH=$${WG_DATA_PATH:-$(abspath $(DATA_DIR))} ./$(BUILD_DIR)/wgtrain --config $(RUN_CONFIG) $(ARGS)

fixture: setup $(FIXTURE)/.zgroup

$(FIXTURE)/.zgroup: tests/data/make_anemoi_store.py
	mkdir -p $(DATA_DIR)
	/usr/bin/python3 tests/data/make_anemoi_store.py $(FIXTURE) --lat 16 --lon 32

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	./$(BUILD_DIR)/bench_checkpoint_modes $(ARGS)

clean:
	rm -rf $(BUILD_DIR)
