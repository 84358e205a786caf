# gpuprof: `make demo` runs the whole pipeline on captured H100 traces (it
# needs only Go and make), `make test` runs every test (it installs the
# Debian packages the tests need first). No variable here is named after a
# common environment variable, so the environment cannot redirect outputs.
GO       ?= go
BIN      := bin
DEMO_DIR ?= gpuprof-demo
# The injection library goes where bin/gpuprof looks for it: lib/ beside it.
INJECT_LIBDIR := $(abspath $(BIN)/lib)
SCREENSHOT ?= docs/report-screenshot.png
# The commit gpuprof version prints where Go's build information lacks it.
BUILD_COMMIT := $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null && echo $$c || echo "$$c (modified)"; })
# Fuzz budgets are counts, not durations: with a duration, Go 1.26's fuzzing
# coordinator can report a bare "context deadline exceeded" at the end of a
# loaded run (go.dev/issue/75804, fixed in Go 1.27), which failed CI once.
FUZZTIME ?= 20000x
# Packages whose concurrency the race detector checks.
RACE_PKGS := ./profile/... ./collector/... ./reducer/... ./broker/...

.PHONY: all build test demo demo-check screenshot bench inject setup deps vet fuzz clean

all: build

setup:
	@./scripts/setup-debian

deps:
	@$(GO) mod download

build: deps
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "-X 'main.commit=$(BUILD_COMMIT)'" -o $(BIN)/gpuprof ./cmd/gpuprof
	@./$(BIN)/gpuprof version

vet: deps
	$(GO) vet ./...

test: setup deps vet
	$(GO) test -race -timeout 20m $(RACE_PKGS)
	$(GO) test -timeout 20m $$($(GO) list ./... | grep -v -e /profile -e /collector -e /reducer -e /broker)
	# Page faults counted without the race detector, whose shadow memory faults too.
	$(GO) test -timeout 5m -run '^TestPrefault' ./collector/online
	@$(MAKE) --no-print-directory demo-check
	@$(MAKE) --no-print-directory fuzz

# The demo's merged 8-rank profile, exported and read back by Hatchet's
# HPCToolkit reader (an implementation we did not write).
demo-check: build
	rm -rf $(BIN)/demo-check
	./$(BIN)/gpuprof demo -o $(BIN)/demo-check >/dev/null
	GPUPROF_HATCHET_PROFILE=$(abspath $(BIN)/demo-check) $(GO) test -count=1 -run 'TestHatchetReadsProfileFile' -v ./viewer-export/hpctoolkit/

# Short runs of every fuzz target (the seeds also run in plain `go test`).
fuzz:
	@./scripts/fuzz-short $(FUZZTIME)

demo: build
	./$(BIN)/gpuprof demo --force -o $(DEMO_DIR)

# docs/report-screenshot.png from the current demo, in headless Chromium
# (scripts/setup-debian installs it).
screenshot: demo
	./scripts/screenshot $(DEMO_DIR)/report.html $(SCREENSHOT)

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 3x ./profile/ ./collector/... ./reducer/...

# The injection library and the CUDA test programs: only where nvcc exists.
inject:
	@command -v nvcc >/dev/null || { echo "make inject: nvcc not found (needs the CUDA toolkit)"; exit 1; }
	$(MAKE) -C collector/inject INJECT_LIBDIR=$(INJECT_LIBDIR)
	@echo "injection library: $(INJECT_LIBDIR)/libgpuprof_inject.so (bin/gpuprof finds it there)"

clean:
	rm -rf $(BIN) $(DEMO_DIR)
