package blame

import "strings"

// Dependency is the kind of wait a stall reason stands for, which decides
// the sources it may be blamed on (GPA's opcode rule).
type Dependency uint8

// Dependencies.
const (
	DepNone   Dependency = iota // the stall stays at the sampled instruction
	DepMemory                   // long scoreboard: L1TEX results (global, local, generic, texture)
	DepMIO                      // short scoreboard: MIO results (shared memory, MUFU, conversions, S2R, SHFL)
	DepFixed                    // wait: a fixed-latency result still in flight
)

// Group is GPA's coarse stall class (Fig. 3's top level, plus the active
// samples).
type Group string

// Groups.
const (
	GActive   Group = "active"               // the warp issued or was eligible
	GMemDep   Group = "memory dependency"    // waits on L1TEX data
	GExecDep  Group = "execution dependency" // waits on MIO or fixed-latency results
	GSync     Group = "synchronization"      // barriers, memory barriers, sleeping
	GThrottle Group = "memory throttle"      // LSU/MIO/TEX queues full
	GPipe     Group = "pipe busy"            // math pipe or dispatch
	GFetch    Group = "instruction fetch"    // no instructions, branch resolution
	GConstMem Group = "constant memory"      // immediate constant cache miss
	GOther    Group = "other"                // drain, misc and reasons unknown here
)

// Reason describes a CUPTI stall reason (the metric name without the
// "smsp__pcsamp_warps_issue_stalled_" prefix).
type Reason struct {
	Name    string
	Latency bool // counts as a latency sample (no instruction issued)
	Dep     Dependency
	Group   Group
}

// reasons maps the CUDA 12/13 PC sampling stall reasons.
var reasons = map[string]Reason{
	"selected":           {"selected", false, DepNone, GActive},
	"not_selected":       {"not_selected", false, DepNone, GActive},
	"long_scoreboard":    {"long_scoreboard", true, DepMemory, GMemDep},
	"short_scoreboard":   {"short_scoreboard", true, DepMIO, GExecDep},
	"wait":               {"wait", true, DepFixed, GExecDep},
	"barrier":            {"barrier", true, DepNone, GSync},
	"membar":             {"membar", true, DepNone, GSync},
	"sleeping":           {"sleeping", true, DepNone, GSync},
	"warpgroup_arrive":   {"warpgroup_arrive", true, DepNone, GSync},
	"mio_throttle":       {"mio_throttle", true, DepNone, GThrottle},
	"lg_throttle":        {"lg_throttle", true, DepNone, GThrottle},
	"tex_throttle":       {"tex_throttle", true, DepNone, GThrottle},
	"math_pipe_throttle": {"math_pipe_throttle", true, DepNone, GPipe},
	"dispatch_stall":     {"dispatch_stall", true, DepNone, GPipe},
	"gmma":               {"gmma", true, DepNone, GPipe},
	"no_instructions":    {"no_instructions", true, DepNone, GFetch},
	"branch_resolving":   {"branch_resolving", true, DepNone, GFetch},
	"imc_miss":           {"imc_miss", true, DepNone, GConstMem},
	"drain":              {"drain", true, DepNone, GOther},
	"misc":               {"misc", true, DepNone, GOther},
}

// LookupReason describes a stall reason name; CUPTI's "_not_issued"
// variants (the latency part of a reason) map to their base reason. ok is
// false for names not known here (they count as latency, group other).
func LookupReason(name string) (Reason, bool) {
	name = strings.TrimPrefix(name, "smsp__pcsamp_warps_issue_stalled_")
	base := strings.TrimSuffix(name, "_not_issued")
	if r, ok := reasons[base]; ok {
		if base != name {
			r.Name, r.Latency = name, true
		}
		return r, true
	}
	return Reason{Name: name, Latency: true, Group: GOther}, false
}

// Class names GPA's fine stall classes (Fig. 3), by the blamed source.
func Class(r Reason, src Kind, war bool) string {
	switch r.Dep {
	case DepMemory:
		if war {
			return "execution dependency: write after read"
		}
		switch src {
		case KGlobalMem:
			return "memory dependency: global memory"
		case KLocalMem:
			return "memory dependency: local memory"
		case KTextureMem:
			return "memory dependency: texture memory"
		case KConstMem:
			return "memory dependency: constant memory"
		}
		return "memory dependency: generic memory"
	case DepMIO, DepFixed:
		if war {
			return "execution dependency: write after read"
		}
		switch src {
		case KSharedMem:
			return "execution dependency: shared memory"
		case KArithVar:
			return "execution dependency: long-latency arithmetic"
		case KSpecial, KConstMem:
			return "execution dependency: special register or constant"
		}
		return "execution dependency: arithmetic"
	}
	return string(r.Group) + ": " + r.Name
}

// matches is GPA's opcode rule: can a stall of dependency d be caused by
// a producer of kind k?
func matches(d Dependency, k Kind, latency int) bool {
	switch d {
	case DepMemory:
		return k.IsMemory() || k == KConstMem
	case DepMIO:
		return k == KSharedMem || k == KArithVar || k == KSpecial || k == KConstMem
	case DepFixed:
		return latency > 0
	}
	return false
}
