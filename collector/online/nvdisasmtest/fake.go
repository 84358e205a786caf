// Package nvdisasmtest makes a stand-in for nvdisasm, for tests on
// machines without the CUDA toolkit: a shell script that prints what the
// real one would for a cubin whose listing is known, honouring the
// function selection (-fun: ELF symbol indices), and logs every run's
// selection so that tests can check what was disassembled.
package nvdisasmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gpuprof/sass"
)

// Fake is a fake nvdisasm.
type Fake struct {
	Tool string // the executable
	dir  string
}

// New writes a fake nvdisasm for cubin, whose whole listing (or the
// listing of some of its functions) is listing; every run sleeps delay
// first. Asked for symbols whose sections the listing lacks, it prints
// nothing for them, as if they had no code.
func New(t testing.TB, cubin, listing []byte, delay time.Duration) *Fake {
	t.Helper()
	return NewShifted(t, cubin, listing, delay, 0)
}

// NewShifted is New for an nvdisasm that counts symbols shift off from
// the ELF symbol table: asked for index i, it prints the function of
// symbol i+shift (what a wrong guess of its counting would meet).
func NewShifted(t testing.TB, cubin, listing []byte, delay time.Duration, shift int) *Fake {
	t.Helper()
	c, err := sass.ParseCubin(cubin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The SASS sources of a test write their cubin copies under TMPDIR;
	// a test's own directory goes away with it even when a source is not
	// closed.
	t.Setenv("TMPDIR", t.TempDir())
	header, secs := sass.SplitListing(listing)
	for _, d := range []string{"sym", "sec"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("header", header)
	write("whole", listing)
	key := map[string]int{}
	for i, s := range secs {
		key[s.Name] = i
		write(fmt.Sprintf("sec/%d", i), s.Text)
	}
	for _, f := range c.Functions {
		if k, ok := key[f.Section]; ok {
			write(fmt.Sprintf("sym/%d", f.Symbol-shift), []byte(strconv.Itoa(k)))
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
D='%s'
if [ "$1" = "--version" ]; then echo "nvdisasm stand-in for tests"; exit 0; fi
fun=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-fun" ]; then fun="$a"; fi
  prev="$a"
done
echo "run $fun" >> "$D/log"
sleep %.3f
if [ -z "$fun" ]; then exec cat "$D/whole"; fi
cat "$D/header"
seen=" "
for i in $(echo "$fun" | tr ',' ' '); do
  [ -f "$D/sym/$i" ] || continue
  s=$(cat "$D/sym/$i")
  case "$seen" in *" $s "*) continue;; esac
  seen="$seen$s "
  cat "$D/sec/$s"
done
`, dir, delay.Seconds())
	tool := filepath.Join(dir, "nvdisasm")
	if err := os.WriteFile(tool, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return &Fake{Tool: tool, dir: dir}
}

// Runs returns each run's selection of symbol indices, in order (nil for
// a run on the whole module).
func (f *Fake) Runs(t testing.TB) [][]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var runs [][]int
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sel := strings.TrimSpace(strings.TrimPrefix(l, "run"))
		var idx []int
		if sel != "" {
			idx = []int{}
			for _, s := range strings.Split(sel, ",") {
				v, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("fake nvdisasm log: %q", l)
				}
				idx = append(idx, v)
			}
		}
		runs = append(runs, idx)
	}
	return runs
}

// Asked counts how often each symbol index was selected, over all runs,
// and the runs on the whole module.
func (f *Fake) Asked(t testing.TB) (bySymbol map[int]int, whole int) {
	t.Helper()
	bySymbol = map[int]int{}
	for _, r := range f.Runs(t) {
		if r == nil {
			whole++
		}
		for _, s := range r {
			bySymbol[s]++
		}
	}
	return bySymbol, whole
}

// Symbols maps the cubin's function names to their symbol indices.
func Symbols(t testing.TB, cubin []byte) map[string]int {
	t.Helper()
	c, err := sass.ParseCubin(cubin)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, f := range c.Functions {
		m[f.Name] = f.Symbol
	}
	return m
}
