# Two commands do everything on a fresh Debian 12 machine:
#   make run   installs what is missing, builds wgtrain only, trains the default CPU run
#   make test  installs what is missing, builds everything, runs the whole test suite
# Other targets: setup, build (everything), bench, fixture / mixed-fixture (test stores), clean.
#   make run RUN_CONFIG=config/anemoi_fixture.yml   trains on the anemoi fixture store
#   make run RUN_CONFIG=config/cpu_mixed.yml        trains ERA5 + NPP-ATMS + surface obs on fixture stores

BUILD_DIR ?= build
JOBS      ?= 2
RUN_CONFIG ?= config/cpu_small.yml
# Runs on stores (RUN_CONFIG=config/anemoi_fixture.yml, config/cpu_mixed.yml)
# read them under DATA_DIR; the fixture stores are written there first.
DATA_DIR  ?= $(BUILD_DIR)/data
FIXTURE   := $(DATA_DIR)/anemoi-fixture.zarr
# config/cpu_mixed.yml: upstream's three stores, by upstream's file names.
MIXED_DIR := $(DATA_DIR)/mixed
MIXED_ERA5 := $(MIXED_DIR)/aifs-ea-an-oper-0001-mars-o96-1979-2023-6h-v8.zarr
MIXED_ATMS := $(MIXED_DIR)/observations-ea-ofb-0001-2012-2023-npp-atms-radiances-v2.zarr
MIXED_SURF := $(MIXED_DIR)/observations-ea-ofb-0001-1979-2023-combined-surface-v2.zarr
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup configure build wgtrain run test bench fixture mixed-fixture clean

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

RUN_DATA := $(if $(findstring mixed,$(RUN_CONFIG)),$(MIXED_DIR),$(DATA_DIR))
run: wgtrain $(if $(findstring anemoi,$(RUN_CONFIG)),fixture) $(if $(findstring cpu_mixed,$(RUN_CONFIG)),mixed-fixture)
	WG_DATA_PATH=$${WG_DATA_PATH:-$(abspath $(RUN_DATA))} ./$(BUILD_DIR)/wgtrain --config $(RUN_CONFIG) $(ARGS)

fixture: setup $(FIXTURE)/.zgroup

$(FIXTURE)/.zgroup: tests/data/make_anemoi_store.py
	mkdir -p $(DATA_DIR)
	/usr/bin/python3 tests/data/make_anemoi_store.py $(FIXTURE) --lat 16 --lon 32

mixed-fixture: setup $(MIXED_ERA5)/.zgroup $(MIXED_ATMS)/.zgroup $(MIXED_SURF)/.zgroup

$(MIXED_ERA5)/.zgroup: tests/data/make_anemoi_grid_store.py
	mkdir -p $(MIXED_DIR)
	/usr/bin/python3 tests/data/make_anemoi_grid_store.py $(MIXED_ERA5) --grid 16 --dates 28

$(MIXED_ATMS)/.zgroup: tests/data/make_obs_store.py
	mkdir -p $(MIXED_DIR)
	/usr/bin/python3 tests/data/make_obs_store.py $(MIXED_ATMS) --kind atms --hours 168 --gap 30 42

$(MIXED_SURF)/.zgroup: tests/data/make_obs_store.py
	mkdir -p $(MIXED_DIR)
	/usr/bin/python3 tests/data/make_obs_store.py $(MIXED_SURF) --kind synop --hours 168

# JOBS tests at once, one intra-op thread each: OpenMP threads that wait for
# a descheduled peer spin, and two 2-thread processes on 2 cores run up to
# 15x slower than two 1-thread ones.
test: build
	cd $(BUILD_DIR) && OMP_NUM_THREADS=1 ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	./$(BUILD_DIR)/bench_recompute_modes $(ARGS)

clean:
	rm -rf $(BUILD_DIR)
