// Package blame is GPA's instruction blamer (Zhou et al., TPDS 2021, §3.2):
// it attributes each stalled instruction's dependency stalls to the
// instructions it waits on, through backward slices over register,
// predicate and scoreboard def-use chains, a dependency graph pruned by
// opcode, dominator and latency rules, and the apportioning of eq. 1
// (issue samples) or eq. 2 (executed instructions).
//
// The package works on a small model of a function (Func) so that it does
// not depend on how the SASS was obtained; package analysis builds the
// model from the sass package's def-use chains and control bits.
package blame

// Kind is what an instruction does, as far as blaming cares.
type Kind uint8

// Instruction kinds.
const (
	KOther      Kind = iota
	KGlobalMem       // LDG, STG, ATOMG, RED (global)
	KLocalMem        // LDL, STL
	KGenericMem      // LD, ST, ATOM (generic address)
	KTextureMem      // TEX, TLD, SULD
	KSharedMem       // LDS, STS, ATOMS, LDSM
	KConstMem        // LDC, ULDC
	KArithFixed      // fixed-latency ALU/FMA work
	KArithVar        // variable-latency arithmetic: MUFU, conversions, FP64 on some parts, IMAD.WIDE on the MIO path
	KSync            // BAR, MEMBAR, DEPBAR, WARPSYNC
	KControl         // BRA, CALL, RET, EXIT
	KSpecial         // S2R, CS2R, SHFL: MIO-pipe register moves
)

var kindNames = [...]string{"other", "global memory", "local memory", "generic memory", "texture memory", "shared memory",
	"constant memory", "arithmetic", "long-latency arithmetic", "synchronization", "control", "special register"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind?"
}

// IsMemory reports whether k accesses memory through the LSU/TEX paths
// (what a long-scoreboard stall waits on).
func (k Kind) IsMemory() bool {
	return k == KGlobalMem || k == KLocalMem || k == KGenericMem || k == KTextureMem
}

// Inst is one instruction of the model.
type Inst struct {
	Offset uint32
	Op     string // opcode with modifiers, e.g. "LDG.E.64"
	Kind   Kind
	// Guarded: executes under a predicate that may be false; such a
	// definition does not end a backward slice (GPA §3.2.1).
	Guarded bool
	// Latency is the fixed latency in cycles, 0 for variable-latency
	// instructions (their results are waited for through scoreboards).
	Latency int
	// Cycles is the issue distance to the next instruction (the stall
	// count of the control bits); 0 when unknown, counted as 1.
	Cycles int
	// Indirect: a memory instruction whose address comes from a register
	// (stalls without a source are then address computation).
	Indirect bool
	// Deps lists, per register or scoreboard the instruction reads, the
	// instructions whose definitions may reach it (reaching definitions,
	// predicated definitions not killing earlier ones).
	Deps []Dep
}

// Dep is one read of an instruction and its reaching definitions.
type Dep struct {
	Reg  uint32 // opaque register id (R, P, UR, UP, B, or a scoreboard)
	SB   bool   // the read is a wait on a scoreboard
	WAR  bool   // scoreboard set when the producer read its sources (a write-after-read wait)
	Defs []int  // defining instructions; -1 for a value live on entry
}

// Block is a basic block: Insts[Start:End] of the function.
type Block struct {
	Start, End int
	Succs      []int
}

// Func is one function of the model.
type Func struct {
	Name   string
	Insts  []Inst
	Blocks []Block
	// Users[i] maps a register i defines to the instructions that may read
	// that definition (for the dominator rule).
	Users []map[uint32][]int

	blockOf []int
}

// BlockOf returns the block of instruction i.
func (f *Func) BlockOf(i int) int {
	if f.blockOf == nil {
		f.blockOf = make([]int, len(f.Insts))
		for b, bl := range f.Blocks {
			for k := bl.Start; k < bl.End; k++ {
				f.blockOf[k] = b
			}
		}
	}
	return f.blockOf[i]
}

// cycles is the issue distance charged to instruction i on a path.
func (f *Func) cycles(i int) int {
	if c := f.Insts[i].Cycles; c > 0 {
		return c
	}
	return 1
}
