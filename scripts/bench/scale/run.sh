#!/bin/sh
# Simulated-scale run of the reduction tree (see main.go): builds the
# driver and runs it. Arguments go to the driver; one size per command,
# results accumulating in the output directory (results.md, .tsv, .json):
#   scripts/bench/scale/run.sh -sizes 64 -fanin 8,16 -flat 64 -o scale-out
#   scripts/bench/scale/run.sh -sizes 256 -fanin 8,16 -flat 256 -o scale-out
#   scripts/bench/scale/run.sh -sizes 1024 -fanin 8,16 -flat 0 -o scale-out
#   GOGC=50 scripts/bench/scale/run.sh -sizes 4096 -fanin 16 -flat 0 -variants 64 -o scale-out
# 256 and 1024 in one go: -sizes 256,1024 -fanin 8,16 -flat 256
set -e
cd "$(dirname "$0")/../../.."
mkdir -p bin
CGO_ENABLED=0 go build -o bin/scale ./scripts/bench/scale
exec bin/scale "$@"
