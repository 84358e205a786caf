package sass

import (
	"slices"
	"sort"
)

// Entry stands for the function's entry in def-use chains: a use reached by
// Entry reads a value that was live on entry (a parameter, a value set by
// the caller, or an uninitialised register).
const Entry = -1

// DefUse holds, for one function, the registers each instruction writes and
// reads and the reaching-definition chains between them (over the CFG,
// with predicated definitions not killing earlier ones).
//
// Registers include R, P, UR, UP and B registers, expanded to all the
// registers of 64-bit pairs and vectors (LDG.E.128 R4 writes R4..R7). A
// CALL to a known function writes and reads what the callee (and its
// callees) may write and read. When control bits are known, the
// scoreboards are registers too: a producer that sets write or read
// scoreboard SBn defines SBn, an instruction whose wait mask has bit n uses
// SBn, and after a full wait earlier producers no longer reach (a new
// producer does not hide older ones: scoreboards count).
type DefUse struct {
	Func *Function
	Defs [][]Reg // per instruction
	Uses [][]Reg // per instruction
	// UD[i][k] lists the instructions whose definitions of Uses[i][k] may
	// reach instruction i, ascending; Entry (-1) for a live-in value.
	UD [][][]int32
	// DU[i][k] lists the instructions that may use the value of Defs[i][k].
	DU [][][]int32

	kill  [][]bool // per def: the definition certainly happens (kills)
	clear [][]Reg  // per instruction: scoreboards fully waited for
}

// Reaching returns the definitions of r that may reach instruction i (nil if
// i does not read r).
func (d *DefUse) Reaching(i int, r Reg) []int32 {
	if i < 0 || i >= len(d.Uses) {
		return nil
	}
	for k, u := range d.Uses[i] {
		if u == r {
			return d.UD[i][k]
		}
	}
	return nil
}

// Users returns the instructions that may read the value of r written by
// instruction i (nil if i does not write r).
func (d *DefUse) Users(i int, r Reg) []int32 {
	if i < 0 || i >= len(d.Defs) {
		return nil
	}
	for k, u := range d.Defs[i] {
		if u == r {
			return d.DU[i][k]
		}
	}
	return nil
}

// Producers returns the variable-latency instructions whose scoreboards
// instruction i waits on: GPA's link from a stalled instruction to its
// producer. It is empty when control bits are unknown.
func (d *DefUse) Producers(i int) []int32 {
	if i < 0 || i >= len(d.Uses) {
		return nil
	}
	var out []int32
	for k, u := range d.Uses[i] {
		if u.Kind() == KindSB {
			for _, p := range d.UD[i][k] {
				if p >= 0 {
					out = append(out, p)
				}
			}
		}
	}
	return sortUnique32(out)
}

func sortUnique32(a []int32) []int32 {
	sort.Slice(a, func(i, j int) bool { return a[i] < a[j] })
	out := a[:0]
	for i, v := range a {
		if i == 0 || v != a[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// buildDefUse computes def and use sets and reaching definitions.
func buildDefUse(f *Function, g *CFG, summ map[*Function]*regSummary) *DefUse {
	n := len(f.Insts)
	d := &DefUse{
		Func:  f,
		Defs:  make([][]Reg, n),
		Uses:  make([][]Reg, n),
		UD:    make([][][]int32, n),
		DU:    make([][][]int32, n),
		kill:  make([][]bool, n),
		clear: make([][]Reg, n),
	}
	m := f.mod
	for i := range f.Insts {
		in := &f.Insts[i]
		defs, uses := instRegs(in)
		must := !in.Guarded()
		kills := make([]bool, len(defs))
		for k := range kills {
			kills[k] = must
		}
		if in.Flow == FlowCall && in.Callee != "" && m != nil && summ != nil {
			if c := m.byName[in.Callee]; c != nil && summ[c] != nil {
				for _, r := range sortedRegs(summ[c].defs) {
					defs = append(defs, r)
					kills = append(kills, false)
				}
				uses = append(uses, sortedRegs(summ[c].uses)...)
			}
		}
		if c, ok := in.Control(); ok && !in.Never() {
			for b := 0; b < 6; b++ {
				if c.Waits(b) {
					sb := MakeReg(KindSB, b)
					uses = append(uses, sb)
					d.clear[i] = append(d.clear[i], sb)
				}
			}
			for _, b := range []int8{c.WriteBarrier, c.ReadBarrier} {
				if b >= 0 && b < 6 {
					defs = append(defs, MakeReg(KindSB, int(b)))
					kills = append(kills, false)
				}
			}
		}
		// DEPBAR.LE SBn, cnt waits on SBn explicitly; only a count of 0
		// resolves every producer.
		if in.Op == "DEPBAR" {
			for k, o := range in.Operands {
				if o.Kind == OperandReg && o.Reg.Kind() == KindSB {
					uses = append(uses, o.Reg)
					if k+1 < len(in.Operands) && in.Operands[k+1].Kind == OperandImm && in.Operands[k+1].Imm == 0 {
						d.clear[i] = append(d.clear[i], o.Reg)
					}
				}
			}
		}
		defs, kills = dedupDefs(defs, kills)
		d.Defs[i], d.kill[i] = defs, kills
		d.Uses[i] = dedupRegs(uses)
	}
	d.reach(g)
	return d
}

func sortedRegs(m map[Reg]bool) []Reg {
	rs := make([]Reg, 0, len(m))
	for r := range m {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

func dedupRegs(rs []Reg) []Reg {
	if len(rs) > 32 {
		seen := make(map[Reg]bool, len(rs))
		out := rs[:0]
		for _, r := range rs {
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
		return out
	}
	out := rs[:0]
	for i, r := range rs {
		dup := false
		for _, q := range rs[:i] {
			if q == r {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, r)
		}
	}
	return out
}

func dedupDefs(rs []Reg, ks []bool) ([]Reg, []bool) {
	var or []Reg
	var ok []bool
	pos := map[Reg]int{}
	for i, r := range rs {
		j, found := pos[r]
		if !found {
			j = -1
			pos[r] = len(or)
		}
		if j >= 0 {
			ok[j] = ok[j] || ks[i]
			continue
		}
		or = append(or, r)
		ok = append(ok, ks[i])
	}
	return or, ok
}

// reach computes reaching definitions one register at a time: each
// register's definitions are few, so small sorted sets per block beat
// function-wide bit vectors on large kernels. Per register: the local
// effect of each block, a worklist to the fixed point (reachFlow), then the
// chains of each use.
func (d *DefUse) reach(g *CFG) {
	f := d.Func
	n := len(f.Insts)
	for i := 0; i < n; i++ {
		d.UD[i] = make([][]int32, len(d.Uses[i]))
		d.DU[i] = make([][]int32, len(d.Defs[i]))
	}
	if n == 0 || len(g.Blocks) == 0 {
		return
	}
	useKeys, touchKeys := d.regKeys()
	rf := newReachFlow(g)
	for k := 0; k < len(useKeys); {
		var r Reg
		var uses []int32
		r, uses, k = groupKeys(useKeys, k)
		ts := touchesOf(touchKeys, r)
		rf.solve(d, r, ts)
		d.chains(g, r, uses, ts, rf.in)
	}
}

// regKeys groups uses and "touches" (definitions and full waits) by
// register with one sort of (register, instruction) keys instead of maps.
func (d *DefUse) regKeys() (useKeys, touchKeys []uint64) {
	for i := range d.Uses {
		for _, r := range d.Uses[i] {
			useKeys = append(useKeys, uint64(r)<<32|uint64(i))
		}
		for _, r := range d.Defs[i] {
			touchKeys = append(touchKeys, uint64(r)<<32|uint64(i))
		}
		for _, r := range d.clear[i] {
			if d.defIndex(i, r) < 0 {
				touchKeys = append(touchKeys, uint64(r)<<32|uint64(i))
			}
		}
	}
	slices.Sort(useKeys)
	slices.Sort(touchKeys)
	return useKeys, touchKeys
}

// groupKeys returns the register of keys[k], the instructions of its run of
// keys, and the index after the run.
func groupKeys(keys []uint64, k int) (Reg, []int32, int) {
	r := Reg(keys[k] >> 32)
	var out []int32
	for ; k < len(keys) && Reg(keys[k]>>32) == r; k++ {
		out = append(out, int32(uint32(keys[k])))
	}
	return r, out, k
}

// touchesOf returns the instructions that touch r, ascending.
func touchesOf(touchKeys []uint64, r Reg) []int32 {
	k := sort.Search(len(touchKeys), func(k int) bool { return touchKeys[k] >= uint64(r)<<32 })
	if k >= len(touchKeys) || Reg(touchKeys[k]>>32) != r {
		return nil
	}
	_, ts, _ := groupKeys(touchKeys, k)
	return ts
}

// reachFlow is the per-block dataflow of one register's definitions; its
// slices are reused from one register to the next.
type reachFlow struct {
	g           *CFG
	outLocal    [][]int32 // definitions a block itself lets out
	transparent []bool    // what reaches the block's start may reach its end
	in, out     [][]int32
	inWork      []bool
	work        []int
}

func newReachFlow(g *CFG) *reachFlow {
	nb := len(g.Blocks)
	return &reachFlow{
		g:           g,
		outLocal:    make([][]int32, nb),
		transparent: make([]bool, nb),
		in:          make([][]int32, nb),
		out:         make([][]int32, nb),
		inWork:      make([]bool, nb),
		work:        make([]int, 0, nb),
	}
}

// solve computes the definitions of r (touched by instructions ts) that
// reach each block's start (rf.in) and end (rf.out).
func (rf *reachFlow) solve(d *DefUse, r Reg, ts []int32) {
	g := rf.g
	nb := len(g.Blocks)
	outLocal, transparent, in, out, inWork := rf.outLocal, rf.transparent, rf.in, rf.out, rf.inWork
	work := rf.work
	for b := 0; b < nb; b++ {
		outLocal[b], in[b], out[b] = nil, nil, nil
		transparent[b] = true
	}
	// local effect of each block that touches r, walking backwards
	for x := len(ts) - 1; x >= 0; x-- {
		i := int(ts[x])
		b := g.BlockOf(i)
		if !transparent[b] {
			continue
		}
		if k := d.defIndex(i, r); k >= 0 {
			outLocal[b] = append(outLocal[b], int32(i))
		}
		if d.stops(i, r) {
			transparent[b] = false
		}
	}
	work = work[:0]
	for b := 0; b < nb; b++ {
		if g.Blocks[b].Reachable {
			work = append(work, b)
			inWork[b] = true
		}
		sort.Slice(outLocal[b], func(i, j int) bool { return outLocal[b][i] < outLocal[b][j] })
	}
	for len(work) > 0 {
		b := work[0]
		work = work[1:]
		inWork[b] = false
		var newIn []int32
		if b == 0 {
			newIn = []int32{Entry}
		}
		for _, p := range g.Blocks[b].Preds {
			newIn = union32(newIn, out[p])
		}
		in[b] = newIn
		newOut := outLocal[b]
		if transparent[b] {
			newOut = union32(append([]int32(nil), outLocal[b]...), newIn)
		}
		if !equal32(newOut, out[b]) {
			out[b] = newOut
			for _, s := range g.Blocks[b].Succs {
				if !inWork[s] {
					inWork[s] = true
					work = append(work, s)
				}
			}
		}
	}
	rf.work = work
}

// chains records, for each use of r, its reaching definitions and the
// matching def-use links. uses and ts are the instructions that use and
// touch r, ascending; in the definitions of r reaching each block's start.
func (d *DefUse) chains(g *CFG, r Reg, uses, ts []int32, in [][]int32) {
	for _, ui := range uses {
		i := int(ui)
		b := g.BlockOf(i)
		var reach []int32
		stopped := false
		// touches of r before i in the same block, nearest first
		x := sort.Search(len(ts), func(x int) bool { return ts[x] >= ui }) - 1
		for ; x >= 0 && int(ts[x]) >= g.Blocks[b].Start; x-- {
			j := int(ts[x])
			if d.defIndex(j, r) >= 0 {
				reach = append(reach, int32(j))
			}
			if d.stops(j, r) {
				stopped = true
				break
			}
		}
		if !stopped && g.Blocks[b].Reachable {
			reach = append(reach, in[b]...)
		}
		reach = sortUnique32(reach)
		for k, u := range d.Uses[i] {
			if u == r {
				d.UD[i][k] = reach
			}
		}
		for _, di := range reach {
			if di < 0 {
				continue
			}
			if k := d.defIndex(int(di), r); k >= 0 {
				d.DU[di][k] = append(d.DU[di][k], int32(i))
			}
		}
	}
}

func (d *DefUse) defIndex(i int, r Reg) int {
	for k, q := range d.Defs[i] {
		if q == r {
			return k
		}
	}
	return -1
}

// stops reports whether no definition of r before instruction i reaches
// past it: i certainly writes r, or i fully waits on scoreboard r (the wait
// happens before issue, so i's own scoreboard definition still reaches).
func (d *DefUse) stops(i int, r Reg) bool {
	if k := d.defIndex(i, r); k >= 0 && d.kill[i][k] {
		return true
	}
	for _, c := range d.clear[i] {
		if c == r {
			return true
		}
	}
	return false
}

func union32(a, b []int32) []int32 {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return append([]int32(nil), b...)
	}
	out := make([]int32, 0, len(a)+len(b))
	i, j := 0, 0
	sa := append([]int32(nil), a...)
	sort.Slice(sa, func(x, y int) bool { return sa[x] < sa[y] })
	for i < len(sa) || j < len(b) {
		switch {
		case j >= len(b) || (i < len(sa) && sa[i] < b[j]):
			out = append(out, sa[i])
			i++
		case i >= len(sa) || b[j] < sa[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, sa[i])
			i++
			j++
		}
	}
	return out
}

func equal32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
