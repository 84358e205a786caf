#!/bin/sh
# Regenerates the nvdisasm samples under testdata/sass/ on a machine with the
# CUDA toolkit (the committed files came from CUDA 13.0). Run from the
# repository root; writes into a scratch directory and prints a tarball path.
# Absolute build directories in the line map are rewritten to repository paths
# so the samples carry no machine-specific names. Cubins are built without
# -lineinfo for the same reason (their DWARF would hold the build directory).
set -u
out=${1:-/tmp/sass-samples}
rm -rf "$out"; mkdir -p "$out/probe" "$out/cflow" "$out/hpctoolkit-loops"
top=$(pwd)
dis() { # dis cubin prefix srcdir repo-dir
  nvdisasm -c -g -gi -poff "$1" > "$2.sass.txt" 2>&1
  nvdisasm -c -gi -hex "$1" > "$2.hex.txt" 2>&1
  nvdisasm -bbcfg "$1" > "$2.cfg.dot" 2>&1
  sed -i "s#$3/#$4/#g" "$2.sass.txt" "$2.hex.txt" "$2.cfg.dot"
}
for p in probe/k cflow/c; do
  d=$(dirname $p); b=$(basename $p)
  for sm in 80 90 100 120; do
    tmp=$(mktemp -d); cp "testdata/sass/$p.cu" "$tmp/"
    ( cd "$tmp" && nvcc -O3 -lineinfo -arch=sm_$sm -cubin -o "$b.cubin" "$b.cu" ) > "$out/$p.sm$sm.log" 2>&1 || { cat "$out/$p.sm$sm.log"; continue; }
    dis "$tmp/$b.cubin" "$out/$p.sm$sm" "$tmp" "testdata/sass/$d"
    ( cd "$tmp" && nvcc -O3 -arch=sm_$sm -cubin -o "$b.nl.cubin" "$b.cu" ) >> "$out/$p.sm$sm.log" 2>&1 && \
      cp "$tmp/$b.nl.cubin" "$out/$p.sm$sm.cubin" && nvdisasm -c -hex "$tmp/$b.nl.cubin" > "$out/$p.sm$sm.cubin.hex.txt" 2>&1
    rm -rf "$tmp"
  done
done
g=testdata/sass/hpctoolkit-loops/loops.gpubin
if [ -f "$g" ]; then dis "$g" "$out/hpctoolkit-loops/loops" "$top/nonexistent" "x"; fi
nvdisasm --version > "$out/nvdisasm-version.txt" 2>&1
echo "$out"
