#!/bin/sh
# Soak test of the pipeline (see main.go): builds the driver and runs it.
# Arguments go to the driver, e.g.
#   scripts/bench/soak/run.sh -duration 10m -ranks 8 -rate 5 -o soak-out
set -e
cd "$(dirname "$0")/../../.."
mkdir -p bin
CGO_ENABLED=0 go build -o bin/soak ./scripts/bench/soak
exec bin/soak "$@"
