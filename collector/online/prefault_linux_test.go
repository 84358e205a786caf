//go:build linux && !race

package online

import (
	"runtime"
	"syscall"
	"testing"
)

// A prefaulted table is mapped before its first touch, and its contents
// are the zeros make gave it: touching every page of 48 MiB afterwards
// takes a small fraction of the faults the same touch of a fresh table
// takes (a fault or two a page). Not under the race detector, whose
// shadow memory takes faults of its own at the same touches.
func TestPrefaultMapsTable(t *testing.T) {
	const n = 48 << 20 / 16 // 48 MiB of vc: more than the tests before it hold, so fresh memory
	faults := func() int64 {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return ru.Minflt
	}
	touch := func(tab []vc) int64 {
		f0 := faults()
		for i := 0; i < len(tab); i += 4096 / 16 {
			if tab[i] != (vc{}) {
				t.Fatalf("slot %d is %v, want zero", i, tab[i])
			}
			tab[i].n++
		}
		return faults() - f0
	}
	fresh := make([]vc, n)
	plain := touch(fresh)
	tab := make([]vc, n) // while fresh is alive: not its memory
	prefault(tab)
	if populateOff.Load() {
		t.Skip("the kernel refused MADV_POPULATE_WRITE (before Linux 5.14)")
	}
	after := touch(tab)
	runtime.KeepAlive(fresh)
	pages := int64(n * 16 / 4096)
	t.Logf("faults touching %d pages: %d fresh, %d prefaulted", pages, plain, after)
	if plain < pages/2 {
		t.Skipf("a fresh table's touch took only %d faults for %d pages (memory reused): nothing to compare", plain, pages)
	}
	if after*4 > plain {
		t.Errorf("a prefaulted table's touch took %d faults, a fresh one's %d", after, plain)
	}
}
