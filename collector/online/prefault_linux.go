//go:build linux

package online

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14).
const madvPopulateWrite = 23

// populateOff: the kernel refused MADV_POPULATE_WRITE once; not asked again.
var populateOff atomic.Bool

// prefault maps the pages of a table just allocated in one system call,
// as if each were written: a table grown into fresh memory otherwise takes
// two page faults a page at its first touch (the read maps the zero page,
// the write copies it). On the H100's virtual machine a third of a pointer
// chase's collector CPU was the kernel's, about 400,000 faults a run; the
// tables' contents are unchanged (the pages are zero either way). Small
// tables, and memory the runtime reuses (already mapped), cost the call
// little or nothing.
func prefault[T any](s []T) {
	n := uintptr(len(s)) * unsafe.Sizeof(*new(T))
	if n < prefaultMin || populateOff.Load() {
		return
	}
	const page = 4096
	base := unsafe.Pointer(unsafe.SliceData(s))
	p := uintptr(base)
	start := (p + page - 1) &^ (page - 1)
	end := (p + n) &^ (page - 1)
	if end <= start {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(base, start-p)), end-start)
	if err := syscall.Madvise(b, madvPopulateWrite); err != nil {
		populateOff.Store(true)
	}
	runtime.KeepAlive(s)
}

// prefaultMin is the smallest table prefault maps (16 pages).
const prefaultMin = 64 << 10
