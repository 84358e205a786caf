package analysis

import (
	"fmt"

	"gpuprof/analysis/blame"
	"gpuprof/profile"
	"gpuprof/symname"
)

// kernelView gathers one kernel context's PC samples with the SASS of its
// functions and the blamer's result.
type kernelView struct {
	x *Index
	k profile.NodeID
	// T is the kernel's samples, A its active samples (GPA §2.2: at least
	// one warp of the scheduler issued), L its latency samples.
	T, A, L float64
	hybrid  bool
	gpaOnly bool
	// hasNI: the profile has CUPTI's _not_issued variants, so each
	// instruction's latency samples are known (fnView.ni).
	hasNI  bool
	fns    []*fnView
	byNode map[profile.NodeID]instRef
	// noCode counts samples at instructions whose SASS is unknown.
	noCode float64
	// par caches the parallelism facts (kernelView.parallelism).
	par     *par
	parDone bool
	// objBytes caches objectBytes (lifetime.go).
	objBytes map[profile.PC]float64
	// foot and footTotal cache footprint (roofline.go).
	foot      map[profile.ObjectID]float64
	footTotal float64
}

// fnView is one GPU function of a kernel context.
type fnView struct {
	c    *code
	fid  profile.FuncID
	node []profile.NodeID // instruction node per instruction (0 if not sampled)
	s    []blame.Samples
	r    *blame.Result
	// ni is each instruction's not-issued samples by reason (the samples
	// taken when its scheduler issued nothing), when the profile has them.
	ni []map[string]float64
}

type instRef struct {
	fv *fnView
	i  int
}

// where locates instruction i of fv (through its profile node when
// sampled, else from the SASS line map).
func (kv *kernelView) where(fv *fnView, i int) Where {
	var w Where
	if id := fv.node[i]; id != 0 {
		w = kv.x.Where(id)
	} else {
		w = Where{Context: kv.k, Kernel: symname.Demangle(kv.x.P.Nodes[kv.k].Frame.Function), Function: symname.Demangle(fv.c.F.Name)}
		w.File, w.Line = fv.c.lineOf(i)
		w.Loop = fv.c.loopLine(fv.c.Loop[i])
		if f := kv.x.P.Funcs; f != nil {
			for id, fn := range f {
				if fn.Name == fv.c.F.Name {
					pc := profile.PC{Func: id, Offset: uint32(fv.c.F.Insts[i].Offset)}
					w.PC = &pc
					break
				}
			}
		}
	}
	if w.Loop == "" {
		w.Loop = fv.c.loopLine(fv.c.Loop[i])
	}
	w.SASS = fmt.Sprintf("/*%04x*/ %s", fv.c.F.Insts[i].Offset, fv.c.F.Insts[i].Text())
	return w
}

// self returns instruction i's own samples of the given reasons (all if
// none named).
func (fv *fnView) self(i int, reasons ...string) float64 {
	m := fv.r.Self[i]
	if len(reasons) == 0 {
		t := 0.0
		for _, v := range m {
			t += v
		}
		return t
	}
	t := 0.0
	for _, r := range reasons {
		t += m[r]
	}
	return t
}

// total is instruction i's samples before blaming.
func (fv *fnView) total(i int) float64 { return fv.s[i].Total() }

// active is instruction i's active samples: those taken while its
// scheduler issued (GPA §2.2), all samples less the not-issued ones where
// the profile has them, else the selected and not_selected samples.
func (fv *fnView) active(i int) float64 {
	if fv.ni != nil {
		t := fv.total(i)
		for _, v := range fv.ni[i] {
			t -= v
		}
		return max(t, 0)
	}
	return fv.s[i].ByReason["selected"] + fv.s[i].ByReason["not_selected"]
}

// latencyShare is the share of instruction i's samples of reason r that
// were latency samples (not issued): 1 without not-issued data.
func (fv *fnView) latencyShare(i int, r string) float64 {
	if fv.ni == nil {
		return 1
	}
	all := fv.s[i].ByReason[r]
	if all <= 0 {
		return 1
	}
	return min(1, fv.ni[i][r]/all)
}

// blamedOn is the latency samples blamed on instruction i as a source.
func (fv *fnView) blamedOn(i int) float64 {
	t := 0.0
	for _, e := range fv.r.Edges {
		if e.Src == i {
			t += e.Samples
		}
	}
	return t
}

// cost is what removing instruction i would save: its own samples and the
// stalls blamed on it.
func (fv *fnView) cost(i int) float64 { return fv.total(i) - fv.depSelf(i) + fv.blamedOn(i) }

// depSelf is the part of i's samples that the blamer moved to its sources.
func (fv *fnView) depSelf(i int) float64 {
	moved := 0.0
	for _, e := range fv.r.Edges {
		if e.Dst == i {
			moved += e.Samples
		}
	}
	return moved
}

// nodeOf is the profile node of instruction i of fv in this kernel context
// (0 if the profile has none).
func (kv *kernelView) nodeOf(fv *fnView, i int) profile.NodeID {
	return kv.x.Inst[InstKey{kv.k, profile.PC{Func: fv.fid, Offset: uint32(fv.c.F.Insts[i].Offset)}}]
}

// memReasons are the stall reasons of a kernel waiting on the memory
// system.
var memReasons = map[string]bool{"long_scoreboard": true, "lg_throttle": true, "tex_throttle": true, "drain": true, "membar": true}

// memAt is instruction i's own samples of memory stall reasons.
func (fv *fnView) memAt(i int) float64 {
	t := 0.0
	for r, v := range fv.s[i].ByReason {
		if memReasons[r] {
			t += v
		}
	}
	return t
}

// memSamples is the kernel's samples of memory stall reasons.
func (kv *kernelView) memSamples() float64 {
	t := 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			for r, v := range fv.s[i].ByReason {
				if memReasons[r] {
					t += v
				}
			}
		}
	}
	return t
}

// bytesAt is the memory traffic measured at an instruction node: its
// distinct 32-byte sectors, else its lane accesses times their width.
func (kv *kernelView) bytesAt(id profile.NodeID, width int) float64 {
	vs := kv.x.P.Nodes[id].Metrics
	if s := vs.Get(profile.MemSectors); s > 0 {
		return 32 * float64(s)
	}
	if width == 0 {
		width = 4
	}
	return float64(width) * float64(vs.Get(profile.MemLoads)+vs.Get(profile.MemStores))
}

// kernelBytes is the kernel context's measured global memory traffic.
func (kv *kernelView) kernelBytes() float64 {
	t := 0.0
	for _, id := range kv.x.InstNodes(kv.k) {
		t += kv.bytesAt(id, 0)
	}
	return t
}

// memoryBound reports whether most of the kernel's samples wait on memory
// (then traffic, not dependency edges, apportions them: every access
// competes for the same bandwidth).
func (kv *kernelView) memoryBound() bool { return !kv.gpaOnly && kv.memSamples() >= 0.5*kv.T }

// trafficCost is the memory stall samples a removal of `bytes` of the
// kernel's traffic saves: memory samples × bytes / kernel bytes.
func (kv *kernelView) trafficCost(bytes float64) float64 {
	b := kv.kernelBytes()
	if b == 0 {
		return 0
	}
	return kv.memSamples() * min(1, bytes/b)
}

// lsuInst reports whether instruction i goes through the load/store unit
// queue that lg_throttle stalls wait on (global, local, generic memory).
func lsuInst(fv *fnView, i int) bool {
	k := fv.c.Model.Insts[i].Kind
	return k == blame.KGlobalMem || k == blame.KLocalMem || k == blame.KGenericMem
}

// executions is instruction i's warp-level executions as far as the
// profile knows them: traced warp accesses, else executed counts, else 1.
func (kv *kernelView) executions(fv *fnView, i int) float64 {
	if id := kv.nodeOf(fv, i); id != 0 {
		vs := kv.x.P.Nodes[id].Metrics
		if w := vs.Get(profile.MemWarpAccess); w > 0 {
			return float64(w)
		}
		if e := vs.Get(profile.InstExecuted); e > 0 {
			return float64(e)
		}
	}
	return 1
}

// throttleRelief is the lg_throttle samples outside rs that removing the
// instructions rs frees: a queue-full stall waits on all the traffic in the
// queue, so the throttle samples anywhere in the kernel shrink with the
// share of LSU instructions removed.
func (kv *kernelView) throttleRelief(rs []instRef) float64 {
	if kv.gpaOnly {
		return 0
	}
	removed := map[instRef]bool{}
	for _, r := range rs {
		removed[r] = true
	}
	var all, gone, lg float64
	for _, fv := range kv.fns {
		for i := range fv.s {
			if !lsuInst(fv, i) {
				continue
			}
			e := kv.executions(fv, i)
			all += e
			if removed[instRef{fv, i}] {
				gone += e
				continue
			}
			lg += fv.s[i].ByReason["lg_throttle"]
		}
	}
	if all == 0 {
		return 0
	}
	return lg * gone / all
}

// device is the spec of the GPU the kernel ran on (DeviceSpec), nil when
// its architecture is not known.
func (kv *kernelView) device() *GPUSpec {
	if m, err := parseModule(kv.x.P.Nodes[kv.k].Frame.Module); err == nil {
		if mod := kv.x.P.Modules[m]; mod != nil {
			return DeviceSpec(kv.x.P, mod.SM)
		}
	}
	return nil
}

// parallelism returns the kernel's parallelism facts (nil when the profile
// lacks the launch configuration or the GPU is unknown).
func (kv *kernelView) parallelism() *par {
	if kv.par != nil || kv.parDone {
		return kv.par
	}
	kv.parDone = true
	cfg, ok := kv.x.LaunchConfig(kv.k)
	if !ok || !cfg.HasAttrs {
		return nil
	}
	g := kv.device()
	if g == nil {
		return nil
	}
	occ, err := cfg.Occupancy(*g)
	if err != nil || occ.BlocksPerSM == 0 {
		return nil
	}
	p := &par{cfg: cfg, g: *g, occ: occ}
	p.W = p.warpsPerScheduler(float64(occ.BlocksPerSM))
	for _, fv := range kv.fns {
		for i := range fv.s {
			p.sel += fv.s[i].ByReason["selected"]
		}
	}
	kv.par = p
	return p
}
