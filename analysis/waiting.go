package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"gpuprof/profile"
	"gpuprof/sass"
)

// Waiting kernels spin until something outside them happens: a loop that
// polls memory the host or another device writes (a system- or GPU-scope
// strong or volatile load), or the clock. Frameworks launch them to hold a
// stream until the host releases it (XLA's DelayKernel times autotuning
// candidates that way) or to wait for a peer (communication kernels). Their
// time is the time the host or the peer takes, not compute: the report
// shows it apart, and no optimizer estimates a speedup of it.
// docs/advice.md ("Waiting kernels and framework phases") states the rule.

// WaitShare is the share of a kernel's samples in polling loops from which
// the kernel counts as waiting.
const WaitShare = 0.5

// pollLoopMax is the most instructions a polling loop holds (nested loops
// included): a poll, a compare, a branch and perhaps a back-off, where a
// loop of real work that happens to read a flag is longer.
const pollLoopMax = 64

// PollKind says what an instruction polls: "system-visible memory" (a
// strong, volatile or MMIO load of system scope), "GPU-visible memory"
// (GPU scope), "the clock" (SR_CLOCKLO/HI, SR_GLOBALTIMER), "" for none.
// A NANOSLEEP back-off counts as a poll of the clock.
func PollKind(in *sass.Instruction) string {
	if in.Op == "NANOSLEEP" {
		return "the clock"
	}
	if in.Class == sass.ClassMemory && (in.Mem.Op == sass.MemLoad || in.Mem.Op == sass.MemAtomic) && !in.Mem.Async &&
		(in.Mem.Space == sass.SpaceGlobal || in.Mem.Space == sass.SpaceGeneric) {
		var strong, sys, gpu bool
		for _, m := range in.Mods {
			switch m {
			case "STRONG", "VOLATILE", "MMIO":
				strong = true
			case "SYS":
				sys = true
			case "GPU":
				gpu = true
			}
		}
		switch {
		case sys:
			return "system-visible memory"
		case strong && gpu && in.Mem.Op == sass.MemLoad:
			return "GPU-visible memory"
		case strong && in.Mem.Op == sass.MemLoad:
			return "system-visible memory"
		}
		return ""
	}
	switch in.Op {
	case "CS2R", "S2R", "S2UR":
		for _, o := range in.Operands {
			if o.Kind == sass.OperandSpecial && (strings.HasPrefix(o.Name, "SR_CLOCK") || strings.HasPrefix(o.Name, "SR_GLOBALTIMER")) {
				return "the clock"
			}
		}
	}
	return ""
}

// pollLoops returns, per function of the kernel, the instructions of its
// polling loops: loops of at most pollLoopMax instructions that hold a
// poll (PollKind).
func (kv *kernelView) pollLoops() map[*fnView][]bool {
	out := map[*fnView][]bool{}
	for _, fv := range kv.fns {
		g := fv.c.F.CFG()
		var in []bool
		for _, l := range g.Loops {
			var idx []int
			for _, b := range l.Blocks {
				for i := g.Blocks[b].Start; i < g.Blocks[b].End; i++ {
					idx = append(idx, i)
				}
			}
			if len(idx) > pollLoopMax {
				continue
			}
			polls := false
			for _, i := range idx {
				if PollKind(&fv.c.F.Insts[i]) != "" {
					polls = true
					break
				}
			}
			if !polls {
				continue
			}
			if in == nil {
				in = make([]bool, len(fv.c.F.Insts))
			}
			for _, i := range idx {
				in[i] = true
			}
		}
		if in != nil {
			out[fv] = in
		}
	}
	return out
}

// waiting returns the note of a waiting kernel (nil when the kernel's
// polling loops hold less than WaitShare of its samples).
func (kv *kernelView) waiting() *Advice {
	loops := kv.pollLoops()
	if len(loops) == 0 || kv.T == 0 {
		return nil
	}
	var in float64
	type poll struct {
		fv      *fnView
		i       int
		samples float64
	}
	var polls []poll
	kinds := map[string]bool{}
	var ops []string
	for _, fv := range kv.fns {
		l := loops[fv]
		for i := range l {
			if !l[i] {
				continue
			}
			in += fv.total(i)
			if k := PollKind(&fv.c.F.Insts[i]); k != "" {
				polls = append(polls, poll{fv, i, fv.total(i)})
				kinds[k] = true
				if op := fv.c.F.Insts[i].Opcode; !slices.Contains(ops, op) {
					ops = append(ops, op)
				}
			}
		}
	}
	share := in / kv.T
	if share < WaitShare {
		return nil
	}
	sort.SliceStable(polls, func(a, b int) bool { return polls[a].samples > polls[b].samples })
	var what []string
	for _, k := range []string{"system-visible memory", "GPU-visible memory", "the clock"} {
		if kinds[k] {
			what = append(what, k)
		}
	}
	a := &Advice{
		Kind: KindWaiting, Category: CatWaiting, Importance: share,
		KernelShare: kv.x.KernelShare(kv.k), Ranks: kv.x.KernelRanks(kv.k),
		Hint: fmt.Sprintf("the kernel spins in a loop that polls %s until the host or another kernel releases it: its time is waiting, not compute, and no optimizer applies. Frameworks launch such kernels to hold a stream while they time their work or wait for a peer; to shorten it, shorten what it waits for.",
			strings.Join(what, " and ")),
	}
	for j, pl := range polls {
		if j == 3 {
			break
		}
		w := kv.where(pl.fv, pl.i)
		w.Amount = pl.samples
		a.Hotspots = append(a.Hotspots, w)
	}
	a.Evidence = fmt.Sprintf("%.0f of T = %.0f samples (%.1f%%) in polling loops (at most %d instructions, polling with %s); waiting from %.0f%% (docs/advice.md)",
		in, kv.T, 100*share, pollLoopMax, strings.Join(ops, ", "), 100*WaitShare)
	return a
}

// WaitingKernels returns the kernel contexts the advice notes as waiting.
func WaitingKernels(p *profile.Profile, as []Advice) map[profile.NodeID]bool {
	out := map[profile.NodeID]bool{}
	for _, a := range as {
		if a.Category != CatWaiting {
			continue
		}
		for _, h := range a.Hotspots {
			if k := p.KernelOf(h.Context); k != profile.RootID {
				out[k] = true
			}
		}
	}
	return out
}

// dropWaiting removes the advice about waiting kernels only (every hotspot
// in one, or static findings on functions only they run).
func dropWaiting(x *Index, as []Advice, waiting map[profile.NodeID]bool, waitFns map[*sass.Function]bool) []Advice {
	out := as[:0]
	for _, a := range as {
		if a.Category != CatWaiting && onlyWaiting(x, a, waiting, waitFns) {
			continue
		}
		out = append(out, a)
	}
	return out
}

func onlyWaiting(x *Index, a Advice, waiting map[profile.NodeID]bool, waitFns map[*sass.Function]bool) bool {
	if len(a.static) > 0 && a.KernelShare == 0 {
		return waitFns[a.static[0].f] || CommLibrary(a.static[0].f.Name) != ""
	}
	if len(a.Hotspots) == 0 {
		return false
	}
	for _, h := range a.Hotspots {
		if !waiting[x.P.KernelOf(h.Context)] {
			return false
		}
	}
	return true
}
