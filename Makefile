# Thin wrapper over Meson so that a new user needs two commands: `make demo`
# and `make check`. Every target installs what it needs first (scripts/deps.sh).
BUILD     ?= build
BUILD_SAN ?= build-san
BUILD_FUZZ ?= build-fuzz
MESON_OPTS ?=
SAN_OPTS  = -Db_sanitize=address,undefined -Db_lundef=false
MESON_TEST = meson test --print-errorlogs --no-rebuild

.PHONY: all deps build build-san test test-san check demo fuzz bench clean cluster cluster-down e2e image test-image image-test

all: build

deps:
	@bash scripts/deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) -Dwerror=true $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	meson compile -C $(BUILD)

$(BUILD_SAN)/build.ninja:
	meson setup $(BUILD_SAN) -Dwerror=true -Dbuildtype=debug $(SAN_OPTS) $(MESON_OPTS)

build-san: deps $(BUILD_SAN)/build.ninja
	meson compile -C $(BUILD_SAN)

test: build
	$(MESON_TEST) -C $(BUILD)

test-san: build-san
	$(MESON_TEST) -C $(BUILD_SAN) --timeout-multiplier 4

# Runs every test, then the whole suite again under ASan+UBSan, and ends with
# the count of test cases: "N passed, N failed, N skipped".
check: build build-san
	@rc=0; \
	$(MESON_TEST) -C $(BUILD) || rc=1; \
	$(MESON_TEST) -C $(BUILD_SAN) --timeout-multiplier 4 || rc=1; \
	python3 scripts/test-summary.py $(BUILD) $(BUILD_SAN) > $(BUILD)/test-summary.txt || rc=1; \
	cat $(BUILD)/test-summary.txt; \
	exit $$rc

demo: build
	@bash scripts/demo.sh $(BUILD)

fuzz: deps
	[ -f $(BUILD_FUZZ)/build.ninja ] || CC=clang meson setup $(BUILD_FUZZ) -Dfuzz=true $(SAN_OPTS)
	meson compile -C $(BUILD_FUZZ)
	@echo "fuzz targets: $(BUILD_FUZZ)/tests/fuzz/fuzz-NAME; run one with a scratch corpus first,"
	@echo "  so that the seeds in tests/fuzz/corpus/NAME stay as committed:"
	@echo "  mkdir -p fuzz-out/NAME && $(BUILD_FUZZ)/tests/fuzz/fuzz-NAME fuzz-out/NAME tests/fuzz/corpus/NAME"

bench: build
	@bash bench/run.sh $(BUILD)

# The image, built offline from the Containerfile with buildah (docs/deploy.md): accel:<version>
# in $(BUILD)/accel-image.tar; test-image: accel-test:<version> (the same plus the emulator and
# the cluster tests' programs) in $(BUILD)/accel-test-image.tar. image-test checks the archive:
# its binaries run in its own root filesystem, the exporter's user, podman load, libvcuda in a
# glibc 2.31 root filesystem.
image: deps
	@bash scripts/image.sh runtime $(BUILD)

test-image: deps
	@bash scripts/image.sh test $(BUILD)

image-test: image test-image
	@bash tests/image/test-image.sh $(BUILD)

# The test cluster (docs/e2e.md): a real single-node Kubernetes inside namespaces, its
# components built from the Go module proxy into a cache, with emulated GPUs as the node's
# devices. `make e2e` builds the images (make image test-image), then runs the end-to-end
# suite against the cluster: the chart installed with every mode's values, TAP, the closing
# count; `make cluster-down` removes it.
cluster: build
	@bash scripts/cluster/up.sh

cluster-down:
	@bash scripts/cluster/down.sh

e2e: image test-image
	@bash tests/e2e/run.sh

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ)
