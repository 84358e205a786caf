package sass

import "strings"

// Class is the coarse semantic class of an opcode, in the spirit of
// redshow's MEMORY/FLOAT/INTEGER/... instruction classes.
type Class uint8

// Opcode classes.
const (
	ClassOther     Class = iota
	ClassMemory          // loads, stores, atomics, reductions, texture and surface access
	ClassFloat           // FP16/FP32/FP64 arithmetic and comparisons, MUFU, float MMA
	ClassInteger         // integer and logic arithmetic, S2R, VOTE, integer MMA
	ClassConvert         // I2F, F2I, F2F, I2I and friends
	ClassMove            // MOV, SHFL, SEL, R2UR: move data without interpreting it
	ClassPredicate       // PLOP3, PSETP, P2R, R2P
	ClassControl         // BRA, BRX, JMP, JMX, CALL, RET, EXIT, KILL, BPT
	ClassSync            // BAR, BSSY, BSYNC, BREAK, WARPSYNC, DEPBAR, MEMBAR, NOP, ...
)

var classNames = [...]string{"OTHER", "MEMORY", "FLOAT", "INTEGER", "CONVERT", "MOVE", "PREDICATE", "CONTROL", "SYNC"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "Class(?)"
}

// Flow says how an instruction transfers control.
type Flow uint8

// Control-flow kinds.
const (
	FlowNone     Flow = iota
	FlowBranch        // BRA, JMP: direct jump
	FlowIndirect      // BRX, JMX: jump through a register
	FlowCall          // CALL
	FlowReturn        // RET
	FlowExit          // EXIT, KILL, BPT.TRAP
)

var flowNames = [...]string{"none", "branch", "indirect", "call", "return", "exit"}

func (f Flow) String() string {
	if int(f) < len(flowNames) {
		return flowNames[f]
	}
	return "Flow(?)"
}

// MemOp is the kind of memory access.
type MemOp uint8

// Memory access kinds.
const (
	MemNone   MemOp = iota
	MemLoad         // returns data from memory
	MemStore        // writes data to memory
	MemAtomic       // read-modify-write that returns the old value (ATOM*)
	MemReduce       // read-modify-write without a result (RED*)
)

var memOpNames = [...]string{"NONE", "LOAD", "STORE", "ATOMIC", "REDUCE"}

func (m MemOp) String() string {
	if int(m) < len(memOpNames) {
		return memOpNames[m]
	}
	return "MemOp(?)"
}

// Space is a memory address space.
type Space uint8

// Address spaces.
const (
	SpaceNone Space = iota
	SpaceGlobal
	SpaceShared
	SpaceLocal
	SpaceConstant
	SpaceGeneric
	SpaceTexture
	SpaceSurface
)

var spaceNames = [...]string{"NONE", "GLOBAL", "SHARED", "LOCAL", "CONSTANT", "GENERIC", "TEXTURE", "SURFACE"}

func (s Space) String() string {
	if int(s) < len(spaceNames) {
		return spaceNames[s]
	}
	return "Space(?)"
}

// MemInfo describes the memory access of an instruction.
type MemInfo struct {
	Op    MemOp
	Space Space
	Bits  int  // access width per thread: 8, 16, 32 (the default), 64, 128 (or 256)
	Async bool // LDGSTS and bulk copies: the data goes to shared memory, not to registers
}

type memEntry struct {
	op    MemOp
	space Space
	async bool
}

var memOps = map[string]memEntry{
	"LD": {MemLoad, SpaceGeneric, false}, "ST": {MemStore, SpaceGeneric, false},
	"LDG": {MemLoad, SpaceGlobal, false}, "STG": {MemStore, SpaceGlobal, false},
	"LDS": {MemLoad, SpaceShared, false}, "STS": {MemStore, SpaceShared, false},
	"LDL": {MemLoad, SpaceLocal, false}, "STL": {MemStore, SpaceLocal, false},
	"LDC": {MemLoad, SpaceConstant, false}, "ULDC": {MemLoad, SpaceConstant, false}, "LDCU": {MemLoad, SpaceConstant, false},
	"LDSM": {MemLoad, SpaceShared, false}, "STSM": {MemStore, SpaceShared, false},
	"ATOM": {MemAtomic, SpaceGeneric, false}, "ATOMG": {MemAtomic, SpaceGlobal, false}, "ATOMS": {MemAtomic, SpaceShared, false},
	"RED": {MemReduce, SpaceGeneric, false}, "REDG": {MemReduce, SpaceGlobal, false}, "REDAS": {MemReduce, SpaceShared, false},
	"LDGSTS": {MemLoad, SpaceGlobal, true},
	"UBLKCP": {MemLoad, SpaceGlobal, true}, "UTMALDG": {MemLoad, SpaceGlobal, true}, "UTMASTG": {MemStore, SpaceGlobal, true},
	"UBLKRED": {MemReduce, SpaceGlobal, true}, "UTMAREDG": {MemReduce, SpaceGlobal, true},
	"SULD": {MemLoad, SpaceSurface, false}, "SUST": {MemStore, SpaceSurface, false},
	"SUATOM": {MemAtomic, SpaceSurface, false}, "SURED": {MemReduce, SpaceSurface, false},
	"TEX": {MemLoad, SpaceTexture, false}, "TLD": {MemLoad, SpaceTexture, false}, "TLD4": {MemLoad, SpaceTexture, false},
	"TXD": {MemLoad, SpaceTexture, false}, "TMML": {MemLoad, SpaceTexture, false},
}

var floatOps = set("FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSET", "FCHK", "FRND", "FSWZADD", "MUFU",
	"FADD2", "FMUL2", "FFMA2", "FMNMX3", "FADD32I", "FMUL32I", "FFMA32I",
	"DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DSET", "DMMA",
	"HADD2", "HMUL2", "HFMA2", "HSETP2", "HSET2", "HMNMX2", "HADD2_32I", "HMUL2_32I", "HFMA2_32I",
	"HMMA", "HGMMA", "QGMMA", "UTCHMMA", "UTCQMMA", "UTCOMMA", "OMMA", "QMMA",
	"UFADD", "UFMUL", "UFFMA", "UFSETP", "UFMNMX", "UFRND")

var intOps = set("IADD3", "IADD", "IADD32I", "IMAD", "IMAD32I", "IMUL", "IMUL32I", "ISCADD", "ISCADD32I", "IMNMX", "IABS",
	"ISETP", "ISET", "LOP3", "LOP", "LOP32I", "SHF", "SHL", "SHR", "LEA", "POPC", "FLO", "BREV", "BMSK", "SGXT",
	"PRMT", "IDP", "IDP4A", "IDP2A", "VABSDIFF", "VABSDIFF4", "VIADD", "VIMNMX", "VIMNMX3", "VIADDMNMX", "IMNMX3",
	"UIADD3", "UIMAD", "ULOP3", "ULOP", "ULOP32I", "USHF", "USHL", "USHR", "ULEA", "UISETP", "UPOPC", "UFLO", "UBREV",
	"UPRMT", "USGXT", "UBMSK", "UIMNMX", "UVIADD", "UIADD3.64",
	"S2R", "S2UR", "CS2R", "VOTE", "VOTEU", "MATCH", "REDUX", "CREDUX", "ELECT", "IMMA", "IGMMA", "BMMA", "UTCIMMA",
	"POPC", "BITEXTRACT")

var convOps = set("F2F", "F2I", "I2F", "I2I", "F2IP", "I2FP", "F2FP", "I2IP", "UF2F", "UI2F", "UF2I", "UI2FP", "UF2FP")

// FSEL is a move: ptxas selects the halves of doubles with it.
var moveOps = set("MOV", "MOV32I", "UMOV", "SHFL", "SEL", "USEL", "FSEL", "UFSEL", "R2UR", "PRMT32I", "MOVM", "UMOV32I", "RPCMOV", "LDTRAM")

var predOps = set("PLOP3", "UPLOP3", "PSETP", "UPSETP", "P2R", "R2P", "UP2UR", "UR2UP", "PSET")

var syncOps = set("BAR", "BSSY", "BSYNC", "BREAK", "WARPSYNC", "DEPBAR", "LDGDEPBAR", "MEMBAR", "ERRBAR", "CGAERRBAR",
	"NOP", "YIELD", "NANOSLEEP", "BMOV", "ARRIVES", "SYNCS", "FENCE", "CCTL", "CCTLL", "CCTLT", "UCGABAR_ARV",
	"UCGABAR_WAIT", "WARPGROUP", "ACQBULK", "ACQSHMINIT", "BPT", "PMTRIG", "SETCTAID", "SETLMEMBASE", "ENDCOLLECTIVE",
	"UTCBAR", "UTMACCTL", "UTMACMDFLUSH", "USETMAXREG", "WARPGROUPDEPBAR")

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// classify derives Class, Flow and MemInfo from the base opcode and modifiers.
func classify(op string, mods []string, operands []Operand) (Class, Flow, MemInfo) {
	switch op {
	case "BRA", "JMP":
		return ClassControl, FlowBranch, MemInfo{}
	case "BRX", "JMX":
		return ClassControl, FlowIndirect, MemInfo{}
	case "CALL":
		return ClassControl, FlowCall, MemInfo{}
	case "RET":
		return ClassControl, FlowReturn, MemInfo{}
	case "EXIT", "KILL":
		return ClassControl, FlowExit, MemInfo{}
	case "BPT":
		if hasMod(mods, "TRAP") {
			return ClassControl, FlowExit, MemInfo{}
		}
		return ClassSync, FlowNone, MemInfo{}
	}
	if e, ok := memOps[op]; ok {
		return ClassMemory, FlowNone, MemInfo{Op: e.op, Space: e.space, Bits: memBits(op, mods), Async: e.async}
	}
	switch {
	case op == "IMAD" && hasMod(mods, "MOV"):
		return ClassMove, FlowNone, MemInfo{}
	case (op == "IMAD" || op == "UIMAD") && len(operands) == 4 && isZeroSrc(operands[1]) && isZeroSrc(operands[2]):
		// IMAD.U32 R4, RZ, RZ, UR10: ptxas's move idiom
		return ClassMove, FlowNone, MemInfo{}
	case op == "CS2R" && len(operands) == 2 && operands[1].Kind == OperandSpecial && operands[1].Name == "SRZ":
		// CS2R R2, SRZ: zeroes a register pair
		return ClassMove, FlowNone, MemInfo{}
	case op == "HFMA2" && len(operands) == 5 && isZeroSrc(operands[1]) && isZeroSrc(operands[2]):
		// HFMA2.MMA R4, -RZ, RZ, 0, 0: constant materialisation, no FP16 math
		return ClassMove, FlowNone, MemInfo{}
	case floatOps[op]:
		return ClassFloat, FlowNone, MemInfo{}
	case intOps[op]:
		return ClassInteger, FlowNone, MemInfo{}
	case convOps[op]:
		return ClassConvert, FlowNone, MemInfo{}
	case moveOps[op]:
		return ClassMove, FlowNone, MemInfo{}
	case predOps[op]:
		return ClassPredicate, FlowNone, MemInfo{}
	case syncOps[op]:
		return ClassSync, FlowNone, MemInfo{}
	}
	return ClassOther, FlowNone, MemInfo{}
}

func isZeroSrc(o Operand) bool { return o.Kind == OperandReg && o.Reg == RZ }

func hasMod(mods []string, m string) bool {
	for _, x := range mods {
		if x == m {
			return true
		}
	}
	return false
}

// memBits returns the per-thread access width of a memory opcode from its
// size modifier (.U8 .S8 .8 .U16 .S16 .16 .32 .64 .128 .256), 32 by default.
func memBits(op string, mods []string) int {
	if op == "LDSM" || op == "STSM" {
		// LDSM.16.M88.4: four 32-bit registers per thread
		n := 1
		for _, m := range mods {
			switch m {
			case "2":
				n = 2
			case "4":
				n = 4
			}
		}
		return 32 * n
	}
	bits := 32
	for _, m := range mods {
		switch m {
		case "U8", "S8", "8":
			bits = 8
		case "U16", "S16", "16", "F16":
			bits = 16
		case "32", "U32", "S32", "F32", "F16x2", "BF16x2", "F16X2", "BF16X2":
			bits = 32
		case "64", "U64", "S64", "F64":
			bits = 64
		case "128":
			bits = 128
		case "256":
			bits = 256
		}
	}
	return bits
}

// atomicType reports the data type an atomic or reduction names in its
// modifiers: float for .F32/.F64/.F16x2/.BF16x2, int for the rest; the
// unit size is 16 for the packed half types.
func atomicType(mods []string) (DataType, int) {
	for _, m := range mods {
		switch strings.ToUpper(m) {
		case "F32":
			return TypeFloat, 32
		case "F64":
			return TypeFloat, 64
		case "F16X2", "BF16X2", "F16", "BF16":
			return TypeFloat, 16
		}
	}
	return TypeInt, 0
}
