package analysis

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gpuprof/sass"
	"gpuprof/symname"
)

// GPUscout's static checks (SC-W 2023, §4).
const (
	StaticVectorize  = "vectorized load"
	StaticSpill      = "register spilling"
	StaticShared     = "shared memory candidate"
	StaticAtomics    = "shared atomics"
	StaticRestrict   = "read-only (__restrict__)"
	StaticTexture    = "texture memory candidate"
	StaticConversion = "datatype conversion"
	// Not GPUscout's: a loop's running value kept in memory (carried.go).
	StaticCarried = "value carried in memory"
)

// StaticCheck runs GPUscout's static SASS analyses over every function of
// m; no profile is needed. Each finding lists the flagged instructions
// with their source lines.
func StaticCheck(m *sass.Module) []Advice {
	var out []Advice
	for _, f := range m.Functions {
		if len(f.Insts) == 0 || f.Insts[0].Opcode == "" {
			continue // a cubin-only module has encodings but no opcodes
		}
		c := codeOf(m, f)
		out = append(out, vectorize(c)...)
		out = append(out, spills(c)...)
		out = append(out, sharedCandidates(c)...)
		out = append(out, globalAtomics(c)...)
		out = append(out, readOnly(c)...)
		out = append(out, conversions(c)...)
		out = append(out, carried(c)...)
	}
	return out
}

// staticAdvice builds a finding over instructions idx of c.
func staticAdvice(c *code, kind, hint, evidence string, idx []int) Advice {
	a := Advice{Kind: kind, Category: CatStatic, Hint: hint, Evidence: evidence}
	for _, i := range idx {
		w := Where{Kernel: symname.Demangle(c.F.Name), Function: symname.Demangle(c.F.Name)}
		w.File, w.Line = c.lineOf(i)
		w.Loop = c.loopLine(c.Loop[i])
		w.SASS = fmt.Sprintf("/*%04x*/ %s", c.F.Insts[i].Offset, c.F.Insts[i].Text())
		a.Hotspots = append(a.Hotspots, w)
		a.static = append(a.static, staticRef{c.F, i})
	}
	return a
}

func isGlobalLoad(in *sass.Instruction) bool {
	return in.Class == sass.ClassMemory && in.Mem.Op == sass.MemLoad && !in.Mem.Async &&
		(in.Mem.Space == sass.SpaceGlobal || in.Mem.Space == sass.SpaceGeneric)
}

func memOperand(in *sass.Instruction) (sass.Operand, bool) {
	for _, o := range in.Operands {
		if o.Kind == sass.OperandMem {
			return o, true
		}
	}
	return sass.Operand{}, false
}

// addrKey names a memory operand's base: the base registers and their
// reaching definitions, so two accesses with the same key differ only in
// their immediate offsets.
func addrKey(f *sass.Function, i int, o sass.Operand) string {
	du := f.DefUse()
	var b strings.Builder
	for _, r := range []sass.Reg{o.Base, o.UBase} {
		if r.Tracked() {
			fmt.Fprintf(&b, "%d:%v;", r, du.Reaching(i, r))
		}
	}
	return b.String()
}

// vectorize flags global loads of one block that read adjacent words from
// one base (GPUscout 4.1): one wider load would do.
func vectorize(c *code) []Advice {
	f := c.F
	var out []Advice
	for _, bl := range f.CFG().Blocks {
		groups := map[string][]int{}
		var keys []string
		for i := bl.Start; i < bl.End; i++ {
			in := &f.Insts[i]
			if !isGlobalLoad(in) || in.Mem.Bits >= 128 {
				continue
			}
			o, ok := memOperand(in)
			if !ok || !o.Base.Tracked() {
				continue
			}
			k := addrKey(f, i, o) + strconv.Itoa(in.Mem.Bits)
			if _, seen := groups[k]; !seen {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], i)
		}
		for _, k := range keys {
			g := groups[k]
			if len(g) < 2 {
				continue
			}
			sort.Slice(g, func(a, b int) bool { return offsetOf(f, g[a]) < offsetOf(f, g[b]) })
			width := int64(f.Insts[g[0]].Mem.Bits / 8)
			run := []int{g[0]}
			best := []int{}
			for _, i := range g[1:] {
				if offsetOf(f, i) == offsetOf(f, run[len(run)-1])+width {
					run = append(run, i)
				} else {
					run = []int{i}
				}
				if len(run) > len(best) {
					best = append([]int(nil), run...)
				}
			}
			if len(best) < 2 {
				continue
			}
			sort.Ints(best)
			w := int(width) * 8
			out = append(out, staticAdvice(c, StaticVectorize,
				fmt.Sprintf("%d adjacent %d-bit global loads from one base: load them with one vector access (float2/float4 or int4 through reinterpret_cast on aligned data).", len(best), w),
				fmt.Sprintf("%d %d-bit loads at consecutive offsets of one base register", len(best), w), best))
		}
	}
	return out
}

func offsetOf(f *sass.Function, i int) int64 {
	o, _ := memOperand(&f.Insts[i])
	return o.Offset
}

// spills flags local-memory accesses (GPUscout 4.2).
func spills(c *code) []Advice {
	var idx []int
	inLoop := 0
	for i := range c.F.Insts {
		in := &c.F.Insts[i]
		if in.Class == sass.ClassMemory && in.Mem.Space == sass.SpaceLocal {
			idx = append(idx, i)
			if c.Loop[i] >= 0 {
				inLoop++
			}
		}
	}
	if len(idx) == 0 {
		return nil
	}
	return []Advice{staticAdvice(c, StaticSpill,
		"registers are spilled to local memory (LDL/STL): reduce live values, raise the register limit (__launch_bounds__, -maxrregcount) or avoid dynamically indexed local arrays.",
		fmt.Sprintf("%d local-memory instructions, %d inside loops", len(idx), inLoop), idx)}
}

// sharedCandidates flags global loads inside loops (GPUscout 4.3): data
// loaded in every iteration; if its address does not change it is better
// kept in a register, otherwise a tile in shared memory may serve the
// block's reuse.
func sharedCandidates(c *code) []Advice {
	var out []Advice
	g := c.F.CFG()
	for li := range g.Loops {
		var idx, inv []int
		arith := 0
		for i := range c.F.Insts {
			if c.Loop[i] != li {
				continue
			}
			in := &c.F.Insts[i]
			if isGlobalLoad(in) {
				idx = append(idx, i)
				if _, ok := c.invariantAddress(i, li); ok {
					inv = append(inv, i)
				}
			}
			if in.Class == sass.ClassFloat || in.Class == sass.ClassInteger {
				arith++
			}
		}
		if len(idx) == 0 {
			continue
		}
		ev := fmt.Sprintf("%d global loads and %d arithmetic instructions in the loop at %s; %d at a loop-invariant address", len(idx), arith, c.loopLine(li), len(inv))
		hint := "global memory is loaded in every iteration of this loop: if threads of a block reuse the data, stage it in shared memory (tiling); loads at an address that does not change belong in a register."
		out = append(out, staticAdvice(c, StaticShared, hint, ev, idx))
	}
	return out
}

// globalAtomics flags atomics and reductions on global memory (GPUscout
// 4.4): aggregate per block in shared memory first.
func globalAtomics(c *code) []Advice {
	var idx []int
	inLoop := 0
	for i := range c.F.Insts {
		in := &c.F.Insts[i]
		if in.Class == sass.ClassMemory && (in.Mem.Op == sass.MemAtomic || in.Mem.Op == sass.MemReduce) &&
			(in.Mem.Space == sass.SpaceGlobal || in.Mem.Space == sass.SpaceGeneric) {
			idx = append(idx, i)
			if c.Loop[i] >= 0 {
				inLoop++
			}
		}
	}
	if len(idx) == 0 {
		return nil
	}
	return []Advice{staticAdvice(c, StaticAtomics,
		"atomics on global memory serialise device-wide: accumulate per block with shared-memory atomics (or a warp reduction) and issue one global atomic per block; expect more MIO stalls instead of lg_throttle.",
		fmt.Sprintf("%d global atomic/reduction instructions, %d inside loops", len(idx), inLoop), idx)}
}

// paramBase is the constant-bank offset of the first kernel parameter.
func paramBase(arch string) int64 {
	if n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(arch, "sm_"), "compute_")); err == nil && n < 90 {
		return 0x160
	}
	return 0x210
}

// params returns the kernel parameters (constant-bank offsets, 8-byte
// aligned) that register r at instruction i is computed from, following
// definitions backwards at most maxParamDepth steps.
//
// Each (instruction, register) is expanded once at the smallest depth it is
// reached: the walk used to expand every path, which is exponential in the
// depth on the long dataflow chains of framework kernels (a report of a DDP
// run spent minutes here on NCCL's kernels). The set found is the same, as
// a node reached deeper can only see less of the remaining depth.
func params(f *sass.Function, base int64, i int, r sass.Reg, out map[int64]bool) {
	w := paramWalk{f: f, du: f.DefUse(), base: base, out: out, seen: map[paramNode]int{}}
	w.walk(i, r, 0)
}

const maxParamDepth = 12

type paramNode struct {
	i int
	r sass.Reg
}

type paramWalk struct {
	f    *sass.Function
	du   *sass.DefUse
	base int64
	out  map[int64]bool
	seen map[paramNode]int // smallest depth each node was expanded at
}

func (w *paramWalk) walk(i int, r sass.Reg, depth int) {
	if depth > maxParamDepth || !r.Tracked() {
		return
	}
	n := paramNode{i, r}
	if d, ok := w.seen[n]; ok && d <= depth {
		return
	}
	w.seen[n] = depth
	for _, d := range w.du.Reaching(i, r) {
		if d < 0 {
			continue
		}
		in := &w.f.Insts[d]
		if in.Class == sass.ClassMemory && in.Mem.Space != sass.SpaceConstant {
			continue // a pointer loaded from memory: not a parameter
		}
		for _, o := range in.Operands {
			if o.Kind == sass.OperandConst && o.Bank == 0 && o.Offset >= w.base {
				w.out[(o.Offset-w.base)&^7+w.base] = true
			}
		}
		for _, u := range w.du.Uses[d] {
			if u.Kind() == sass.KindR || u.Kind() == sass.KindUR {
				w.walk(int(d), u, depth+1)
			}
		}
	}
}

func addrParams(f *sass.Function, base int64, i int) map[int64]bool {
	out := map[int64]bool{}
	o, ok := memOperand(&f.Insts[i])
	if !ok {
		return out
	}
	for _, r := range []sass.Reg{o.Base, o.UBase} {
		params(f, base, i, r, out)
	}
	return out
}

// readOnly flags global loads through a parameter pointer that the kernel
// never stores through, not yet using the read-only path (GPUscout 4.5),
// and among them loads from neighbouring addresses, texture candidates
// (GPUscout 4.6).
func readOnly(c *code) []Advice {
	f := c.F
	base := paramBase(c.M.Arch)
	written := map[int64]bool{}
	for i := range f.Insts {
		in := &f.Insts[i]
		if in.Class == sass.ClassMemory && in.Mem.Op != sass.MemLoad && in.Mem.Space != sass.SpaceShared && in.Mem.Space != sass.SpaceLocal {
			for p := range addrParams(f, base, i) {
				written[p] = true
			}
		}
	}
	var cand []int
	byKey := map[string][]int{}
	var keys []string
	for i := range f.Insts {
		in := &f.Insts[i]
		if !isGlobalLoad(in) || hasModifier(in, "CONSTANT") {
			continue
		}
		ps := addrParams(f, base, i)
		if len(ps) == 0 {
			continue
		}
		ro := true
		for p := range ps {
			if written[p] {
				ro = false
			}
		}
		if !ro {
			continue
		}
		cand = append(cand, i)
		o, _ := memOperand(in)
		k := addrKey(f, i, o)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	var out []Advice
	if len(cand) > 0 {
		out = append(out, staticAdvice(c, StaticRestrict,
			"these loads read through pointers the kernel never writes: declare them const __restrict__ (or use __ldg) so the loads take the read-only path and the compiler may reorder them.",
			fmt.Sprintf("%d global loads through read-only parameters without .CONSTANT", len(cand)), cand))
	}
	var tex []int
	for _, k := range keys {
		if g := byKey[k]; len(g) >= 2 {
			tex = append(tex, g...)
		}
	}
	if len(tex) > 0 {
		sort.Ints(tex)
		out = append(out, staticAdvice(c, StaticTexture,
			"read-only loads of neighbouring addresses from one base (spatial locality): texture memory or the read-only cache may serve them; watch tex_throttle and long_scoreboard stalls after the change.",
			fmt.Sprintf("%d read-only loads sharing a base register at different offsets", len(tex)), tex))
	}
	return out
}

func hasModifier(in *sass.Instruction, m string) bool {
	for _, x := range in.Mods {
		if x == m {
			return true
		}
	}
	return false
}

// conversions flags datatype conversions (GPUscout 4.7), per function,
// noting those in loops. Conversions inside the CUDA math library's code
// (sinf's range reduction, say) are left out: the user's types do not
// decide them, and fast math advice covers that code.
func conversions(c *code) []Advice {
	var idx []int
	inLoop := 0
	ops := map[string]int{}
	for i := range c.F.Insts {
		in := &c.F.Insts[i]
		if in.Class == sass.ClassConvert && !libraryCode(c, i) {
			idx = append(idx, i)
			ops[in.Opcode]++
			if c.Loop[i] >= 0 {
				inLoop++
			}
		}
	}
	if len(idx) == 0 {
		return nil
	}
	var parts []string
	for op, n := range ops {
		parts = append(parts, fmt.Sprintf("%s×%d", op, n))
	}
	sort.Strings(parts)
	return []Advice{staticAdvice(c, StaticConversion,
		"datatype conversions (F2F/I2F/F2I) cost issue slots and pipe time: keep data in the type it is computed in (float literals with f suffix, float math functions, integer induction variables).",
		fmt.Sprintf("%d conversions (%s), %d inside loops", len(idx), strings.Join(parts, ", "), inLoop), idx)}
}
