package synth

import "gpuprof/collector/rawstream"

// The kernels of testdata/sass/probe/k.cu as nvdisasm printed them for
// sm_90 (testdata/sass/probe/k.sass.txt): function sizes, the offsets of
// their memory instructions, and the offsets of all real instructions (for
// PC samples and instruction counts), so generated PCs land on the
// instructions a real run of that program would report.

// unit describes how a memory instruction's value is made of units.
type unit struct {
	float bool
	bits  uint8 // unit size
}

var (
	f32 = unit{true, 32}
	f64 = unit{true, 64}
	i16 = unit{false, 16}
	i32 = unit{false, 32}
)

// memInst is one load or store of a probe kernel.
type memInst struct {
	off   uint32
	text  string
	space rawstream.Space
	flags rawstream.Flags
	size  uint8 // bytes per lane
	unit  unit
}

type kernelDef struct {
	name  string // mangled
	size  uint32 // bytes of code (the .size of the symbol, NOPs included)
	last  uint32 // offset of the last real instruction
	insts []memInst
	// loads: offsets of loads whose latency dominates PC samples
}

const (
	ld  = rawstream.FlagRead
	st  = rawstream.FlagWrite
	red = rawstream.FlagRead | rawstream.FlagWrite | rawstream.FlagAtomic
)

var probeKernels = []kernelDef{
	{name: "_Z6reloadPKfPfii", size: 0x700, last: 0x630, insts: []memInst{
		{0x100, "LDG.E R0, desc[UR8][R2.64]", rawstream.SpaceGlobal, ld, 4, f32},          // b[i]
		{0x140, "LDG.E.CONSTANT R4, desc[UR8][R4.64]", rawstream.SpaceGlobal, ld, 4, f32}, // a[0]
		{0x5e0, "LDG.E R4, desc[UR6][R4.64]", rawstream.SpaceGlobal, ld, 4, f32},          // helper: a[k]
		{0x580, "STG.E desc[UR8][R2.64], R7", rawstream.SpaceGlobal, st, 4, f32},          // b[i] = s
	}},
	{name: "_Z4fillPdi", size: 0x180, last: 0xf0, insts: []memInst{
		{0xd0, "STG.E.64 desc[UR4][R2.64], R4", rawstream.SpaceGlobal, st, 8, f64}, // d[i] = 3.0
	}},
	{name: "_Z4vec4PK6float4PS_iPs", size: 0x280, last: 0x1b0, insts: []memInst{
		{0xe0, "LDG.E.128 R4, desc[UR4][R6.64]", rawstream.SpaceGlobal, ld, 16, f32},                    // v = a[i]
		{0x170, "STG.E.128 desc[UR4][R2.64], R4", rawstream.SpaceGlobal, st, 16, f32},                   // b[i] = v'
		{0x180, "STG.E.U16 desc[UR4][R8.64], R13", rawstream.SpaceGlobal, st, 2, i16},                   // s[i] = i
		{0x190, "@P0 REDG.E.ADD.STRONG.GPU desc[UR4][R10.64], R15", rawstream.SpaceGlobal, red, 4, i32}, // atomicAdd(b[0])
	}},
	{name: "_Z3shmPi", size: 0x200, last: 0x110, insts: []memInst{
		{0xa0, "STS [R0+UR4], R7", rawstream.SpaceShared, st, 4, i32},           // t[2*tid%256] = tid
		{0xd0, "LDS R5, [R4+UR4]", rawstream.SpaceShared, ld, 4, i32},           // t[(tid+1)%256]
		{0xf0, "STG.E desc[UR4][R2.64], R5", rawstream.SpaceGlobal, st, 4, i32}, // out[tid]
	}},
}

// CUPTI's stall reason names (CUDA 12/13 PC sampling API).
var stallReasons = []string{
	"smsp__pcsamp_warps_issue_stalled_barrier",
	"smsp__pcsamp_warps_issue_stalled_branch_resolving",
	"smsp__pcsamp_warps_issue_stalled_dispatch_stall",
	"smsp__pcsamp_warps_issue_stalled_drain",
	"smsp__pcsamp_warps_issue_stalled_imc_miss",
	"smsp__pcsamp_warps_issue_stalled_lg_throttle",
	"smsp__pcsamp_warps_issue_stalled_long_scoreboard",
	"smsp__pcsamp_warps_issue_stalled_math_pipe_throttle",
	"smsp__pcsamp_warps_issue_stalled_membar",
	"smsp__pcsamp_warps_issue_stalled_mio_throttle",
	"smsp__pcsamp_warps_issue_stalled_misc",
	"smsp__pcsamp_warps_issue_stalled_no_instructions",
	"smsp__pcsamp_warps_issue_stalled_not_selected",
	"smsp__pcsamp_warps_issue_stalled_selected",
	"smsp__pcsamp_warps_issue_stalled_short_scoreboard",
	"smsp__pcsamp_warps_issue_stalled_sleeping",
	"smsp__pcsamp_warps_issue_stalled_tex_throttle",
	"smsp__pcsamp_warps_issue_stalled_wait",
}
