# gpuprof: `make demo` runs the whole pipeline on captured H100 traces,
# `make test` runs every test. Both install what they need first.
GO       ?= go
BIN      := bin
OUT      ?= gpuprof-demo
# Fuzz budgets are counts, not durations: with a duration, Go 1.26's fuzzing
# coordinator can report a bare "context deadline exceeded" at the end of a
# loaded run (go.dev/issue/75804, fixed in Go 1.27), which failed CI once.
FUZZTIME ?= 20000x
# Packages whose concurrency the race detector checks.
RACE_PKGS := ./profile/... ./collector/... ./reducer/... ./broker/...

.PHONY: all build test demo demo-check bench inject setup deps vet fuzz clean

all: build

setup:
	@./scripts/setup-debian

deps:
	@$(GO) mod download

build: deps
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/gpuprof ./cmd/gpuprof

vet: deps
	$(GO) vet ./...

test: setup deps vet
	$(GO) test -race -timeout 20m $(RACE_PKGS)
	$(GO) test -timeout 20m $$($(GO) list ./... | grep -v -e /profile -e /collector -e /reducer -e /broker)
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

demo: setup build
	./$(BIN)/gpuprof demo -o $(OUT)

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 3x ./profile/ ./collector/... ./reducer/...

# The injection library and the CUDA test programs: only where nvcc exists.
inject:
	@command -v nvcc >/dev/null || { echo "make inject: nvcc not found (needs the CUDA toolkit)"; exit 1; }
	$(MAKE) -C collector/inject

clean:
	rm -rf $(BIN) $(OUT)
