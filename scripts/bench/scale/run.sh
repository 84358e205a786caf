#!/bin/sh
# Simulated-scale run of the reduction tree (see main.go): builds the
# driver and runs it. Arguments go to the driver, e.g.
#   scripts/bench/scale/run.sh -sizes 64,256,1024,4096 -fanin 8,16 -flat 64,256 -o scale-out
set -e
cd "$(dirname "$0")/../../.."
mkdir -p bin
CGO_ENABLED=0 go build -o bin/scale ./scripts/bench/scale
exec bin/scale "$@"
