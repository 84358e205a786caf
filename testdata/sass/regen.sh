#!/bin/sh
# Regenerates the nvdisasm samples that the sass package's tests read, on a
# machine with the CUDA toolkit (the committed files came from CUDA 13.0,
# see nvdisasm-version.txt). Run from the repository root; it writes into a
# scratch directory (first argument) laid out like testdata/sass/.
#
# probe/k.sass.txt, k.hex.txt, k.cfg.dot and k.full.txt are the original
# sm_90 probe (nvdisasm -c -g -gi -poff, -c -gi -hex, -bbcfg, -g); this
# script adds the other architectures and the control-flow probe.
#
# The build directory in line-map file names is rewritten to the
# repository path so that the samples carry no machine-specific names, and
# the cubins are built without -lineinfo for the same reason (their DWARF
# would hold the build directory). Code does not change with -lineinfo: the
# tests check that the cubins' bytes equal the -hex encodings.
set -u
out=${1:-/tmp/sass-samples}
rm -rf "$out"; mkdir -p "$out/probe" "$out/cflow" "$out/hpctoolkit-loops"
dis() { # dis cubin prefix builddir repodir
  nvdisasm -c -g -gi -poff "$1" > "$2.sass.txt" 2>&1
  nvdisasm -c -gi -hex "$1" > "$2.hex.txt" 2>&1
  nvdisasm -bbcfg "$1" > "$2.cfg.dot" 2>&1
  sed -i "s#$3/#$4/#g" "$2.sass.txt" "$2.hex.txt" "$2.cfg.dot"
}
for p in probe/k cflow/c; do
  d=$(dirname $p); b=$(basename $p)
  for sm in 80 90 100 120; do
    tmp=$(mktemp -d); cp "testdata/sass/$p.cu" "$tmp/"
    ( cd "$tmp" && nvcc -O3 -lineinfo -arch=sm_$sm -cubin -o "$b.cubin" "$b.cu" &&
      nvcc -O3 -arch=sm_$sm -cubin -o "$b.nl.cubin" "$b.cu" ) || exit 1
    dis "$tmp/$b.cubin" "$out/$p.sm$sm" "$tmp" "testdata/sass/$d"
    cp "$tmp/$b.nl.cubin" "$out/$p.sm$sm.cubin"
    rm -rf "$tmp"
  done
done
# Kept in the repository: probe/k.sm{80,100,120}.{sass.txt,hex.txt,cfg.dot},
# probe/k.sm{80,90,100,120}.cubin, cflow/c.sm90.sass.txt,
# cflow/c.sm{80,90,100,120}.{hex.txt,cfg.dot}, cflow/c.sm{90,100}.cubin.
g=testdata/sass/hpctoolkit-loops/loops.gpubin
nvdisasm -c -g -gi -poff "$g" > "$out/hpctoolkit-loops/loops.sass.txt" 2>&1
nvdisasm -c -gi -hex "$g" > "$out/hpctoolkit-loops/loops.hex.txt" 2>&1
nvdisasm --version > "$out/nvdisasm-version.txt" 2>&1
echo "$out"
