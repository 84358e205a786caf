package main

import (
	"context"
	"sort"
	"strings"
	"sync"

	"gpuprof/collector"
	"gpuprof/profile"
	"gpuprof/symname"
)

// kernelTimes passes a collection pass's items on and tallies, per GPU
// kernel function, the kernel time and launches they carry, so that
// --mode all can name the hybrid pass's kernel after the PC-sampling pass
// (the hybrid pass counts the instructions of one function per process:
// docs/inject.md). The tally is this collector's own: every rank it
// publishes, none of another collector's.
type kernelTimes struct {
	next collector.Publisher

	mu  sync.Mutex
	fns map[string]*kernelTally // by the function's name as the profile stores it (mangled)
}

// kernelTally is one kernel function's sums over its calling contexts.
type kernelTally struct {
	time, launches, graph uint64
}

func (k *kernelTimes) Publish(ctx context.Context, item *profile.Profile, done bool) error {
	// Read before passing the item on: what follows may change it.
	k.mu.Lock()
	if k.fns == nil {
		k.fns = map[string]*kernelTally{}
	}
	for _, n := range item.Nodes {
		if n.Frame.Kind != profile.KindKernel || n.Frame.Function == "" {
			continue
		}
		t := k.fns[n.Frame.Function]
		if t == nil {
			t = &kernelTally{}
			k.fns[n.Frame.Function] = t
		}
		t.time += n.Metrics.Get(profile.GPUTime)
		t.launches += n.Metrics.Get(profile.GPULaunches)
		t.graph += n.Metrics.Get(profile.GPUGraph)
	}
	k.mu.Unlock()
	return k.next.Publish(ctx, item, done)
}

// hottest returns the kernel function with the most GPU time (its name as
// the profile stores it) and that time, among those launched directly at
// least once: the injection library matches GPUPROF_SASS_KERNEL at a
// launch's API call, which the kernels of a CUDA graph launch never pass.
// Ties go to the first name in byte order; "" when no such kernel was
// timed.
func (k *kernelTimes) hottest() (string, uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	names := make([]string, 0, len(k.fns))
	for n := range k.fns {
		names = append(names, n)
	}
	sort.Strings(names)
	best, bestTime := "", uint64(0)
	for _, n := range names {
		t := k.fns[n]
		if t.time > bestTime && t.launches > t.graph {
			best, bestTime = n, t.time
		}
	}
	return best, bestTime
}

// hybridKernelName is the GPUPROF_SASS_KERNEL value (a substring of the
// kernel's name as CUPTI gives it at the launch: mangled) that names the
// kernel function called name in a profile. The profile keeps the name
// the library read from the cubin, which is that mangled name (or an
// extern "C" kernel's plain one): it is used whole, the closest match. A
// readable (demangled) name is not a substring of the mangled one; its
// plain identifier is ("void ns::k<float>(float*, int)": "k"), which
// every other function of that name and any instantiation also match. ""
// when no identifier can be had (the library then enables the metrics at
// the first launch, as without a name).
func hybridKernelName(name string) string {
	name = strings.TrimSpace(name)
	if name == "" || strings.HasPrefix(name, "_Z") || isIdentifier(name) {
		return name
	}
	id := symname.LastComponent(symname.Short(name))
	if !isIdentifier(id) {
		return ""
	}
	return id
}

// isIdentifier reports whether s is a C identifier (what a function's
// plain name is, and what a mangled name holds it as).
func isIdentifier(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
