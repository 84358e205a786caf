// Package rawstream decodes and writes the raw record stream that the
// injection library sends to its collector (docs/wire.md, version 3).
//
// The decoder is streaming: it holds one frame at a time (at most
// MaxPayload bytes), validates every field before returning the frame, and
// names the byte offset and frame kind of anything it rejects. A stream that
// stops inside a frame, or ends without END, gives an error marked
// Truncated after every whole frame before it has been returned.
package rawstream

import "fmt"

// Magic starts a HELLO payload ("GPRW" little-endian).
const Magic = 0x57525047

// Version is the stream version this package writes; it reads every
// version from MinVersion up. Version 2 added record encodings (header
// byte 21, zero in version 1 streams); version 3 added modules carried in
// MODULE_DATA chunks (for cubins over MaxPayload) and LAUNCH flags (the
// graph bit).
const (
	Version    = 3
	MinVersion = 1
)

// MaxPayload bounds a frame's payload (64 MiB).
const MaxPayload = 64 << 20

// FirstExtension is the first kind reserved for extensions; such frames are
// skipped by the decoder.
const FirstExtension = 1024

// Kind is a frame kind.
type Kind uint32

const (
	KindHello        Kind = 1
	KindModule       Kind = 2
	KindFunction     Kind = 3
	KindLaunch       Kind = 4
	KindAccess       Kind = 5
	KindKernelEnd    Kind = 6
	KindAlloc        Kind = 7
	KindFree         Kind = 8
	KindStallReasons Kind = 9
	KindPCSamples    Kind = 10
	KindInstrCounts  Kind = 11
	KindHostModule   Kind = 12
	KindDropped      Kind = 13
	KindEnd          Kind = 14
	KindModuleData   Kind = 15 // version 3; assembled into its Module by the decoder
)

var kindNames = [...]string{"", "HELLO", "MODULE", "FUNCTION", "LAUNCH", "ACCESS", "KERNEL_END", "ALLOC", "FREE",
	"STALL_REASONS", "PC_SAMPLES", "INSTR_COUNTS", "HOST_MODULE", "DROPPED", "END", "MODULE_DATA"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	if k == KindModuleHash {
		return "MODULE_HASH"
	}
	if k >= FirstExtension {
		return fmt.Sprintf("EXT(%d)", uint32(k))
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// Frame is one decoded frame: one of the pointer types below.
type Frame interface{ Kind() Kind }

// Mode is the measurement mode of a stream.
type Mode uint8

const (
	ModeRedundancy Mode = 1 // Sanitizer API memory-access patching
	ModePCSampling Mode = 2 // CUPTI PC sampling with stall reasons
	ModeHybrid     Mode = 3 // CUPTI SASS metrics (exact instruction counts)
)

func (m Mode) String() string {
	switch m {
	case ModeRedundancy:
		return "redundancy"
	case ModePCSampling:
		return "pcsampling"
	case ModeHybrid:
		return "hybrid"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode is the inverse of Mode.String.
func ParseMode(s string) (Mode, error) {
	for m := ModeRedundancy; m <= ModeHybrid; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("rawstream: unknown mode %q (want redundancy, pcsampling or hybrid)", s)
}

// HELLO flags. HelloSynthetic: the stream was generated, not measured.
// HelloPCSElsewhere (version 3): another process PC-samples this GPU (one
// process per GPU can), so this one gives kernel times only.
// HelloPCSContinuous (version 3): continuous PC sampling; samples carry
// launch id 0, as CUPTI does not say which launch they came from.
const (
	HelloSynthetic     = 1
	HelloPCSElsewhere  = 2
	HelloPCSContinuous = 4
)

// Hello opens every stream.
type Hello struct {
	Version        uint16
	Flags          uint16
	Rank           int32 // -1 if the library does not know it
	PID            uint32
	Mode           Mode
	BlockSampling  uint32 // P
	KernelSampling uint32 // K
	StartNS        uint64
	Host           string
	GPU            string
	GPUUUID        string
	Driver         string
	CUDA           string
	SM             uint16
	Device         int32 // CUDA device ordinal (version 3; -1 if unknown or older)
	Props          DeviceProps
}

// DeviceProps are the GPU's properties as the library read them from the
// device (version 3; zero when unknown). The analysis takes its GPU spec
// from them rather than from the compute capability alone: an H100 PCIe,
// an H200 and a GH200 are all sm_90 with other figures.
type DeviceProps struct {
	SMs          uint32 // multiprocessors
	ClockKHz     uint32 // SM clock (the device's reported rate)
	MemClockKHz  uint32 // memory clock
	MemBusBits   uint32 // memory bus width
	L2Bytes      uint32
	RegsPerSM    uint32
	SharedPerSM  uint32 // bytes
	ThreadsPerSM uint32
	MemBytes     uint64 // device memory
}

// Module is a loaded cubin. A cubin larger than one frame travels in
// MODULE_DATA chunks after its MODULE frame; the decoder assembles them and
// returns one Module with all its Bytes, and the writer splits one.
type Module struct {
	ModuleID   uint64
	ContentKey uint64 // FNV-1a 64 of the bytes
	Size       uint32
	HasBytes   bool
	Bytes      []byte // len Size when HasBytes

	chunked bool // decoding: has_bytes 2, the bytes are still to come
}

// ModuleChunk is the largest MODULE_DATA payload the writer produces.
const ModuleChunk = 16 << 20

// moduleInline reports whether a module's bytes fit in its MODULE frame
// (the fixed fields take 21 bytes).
func moduleInline(size uint32) bool { return uint64(size)+21 <= MaxPayload }

// Function is a GPU function's code range.
type Function struct {
	FunctionID uint32
	ModuleID   uint64
	PC         uint64 // absolute device address of the first instruction, 0 if unknown
	Size       uint32 // 0 if unknown
	Name       string
}

// Launch is a kernel launch.
type Launch struct {
	LaunchID     uint64
	FunctionID   uint32
	Grid         [3]uint32
	Block        [3]uint32
	SharedBytes  uint32
	Stream       uint64
	Instrumented bool     // traced: kernel sampling chose it (flags bit 0)
	Graph        bool     // ran as a kernel node of a CUDA graph launch (flags bit 1, version 3)
	BlockOffset  uint32   // r of block sampling
	Host         []uint64 // raw return addresses, innermost first
}

// Blocks is the number of blocks in the grid.
func (l *Launch) Blocks() uint64 { return uint64(l.Grid[0]) * uint64(l.Grid[1]) * uint64(l.Grid[2]) }

// Access holds the memory-access and block records of one launch. Data is
// the records' raw bytes (validated by the decoder); read them with Records.
type Access struct {
	LaunchID uint64
	Count    uint32
	Data     []byte
}

// KernelEnd closes a launch.
type KernelEnd struct {
	LaunchID      uint64
	StartNS       uint64
	EndNS         uint64
	BlocksTotal   uint32
	BlocksSampled uint32
	Records       uint64
	Dropped       uint64
}

// AllocKind says what kind of memory an allocation is.
type AllocKind uint8

const (
	AllocDevice  AllocKind = 1
	AllocManaged AllocKind = 2
	AllocPinned  AllocKind = 3
	AllocAsync   AllocKind = 4
)

// Alloc is a device memory allocation.
type Alloc struct {
	AllocID uint64
	Address uint64
	Size    uint64
	Memory  AllocKind // the wire field "kind"
	Host    []uint64
}

// Free releases the allocation at Address.
type Free struct{ Address uint64 }

// StallReason names one CUPTI stall reason index.
type StallReason struct {
	Index uint32
	Name  string
}

// StallReasons is CUPTI's table of stall reasons.
type StallReasons struct{ Reasons []StallReason }

// StallCount is the samples of one reason at one PC.
type StallCount struct{ Reason, Samples uint32 }

// PCSample holds the samples taken at one PC.
type PCSample struct {
	FunctionID uint32
	Offset     uint32
	Stalls     []StallCount
}

// PCSamples holds PC samples of one launch (LaunchID 0 in continuous mode).
type PCSamples struct {
	LaunchID uint64
	PCs      []PCSample
}

// InstrCount is the execution count of one instruction.
type InstrCount struct {
	FunctionID     uint32
	Offset         uint32
	Executed       uint64 // warp-level
	ThreadExecuted uint64
}

// InstrCounts holds the instruction counts of one launch.
type InstrCounts struct {
	LaunchID uint64
	Counts   []InstrCount
}

// Segment is a mapped range of a host module.
type Segment struct{ Start, Size uint64 }

// HostModule is a host shared object or executable mapped into the process.
type HostModule struct {
	Base     uint64 // load bias: file vaddr = runtime address - Base
	Path     string
	BuildID  string
	Segments []Segment
}

// Contains reports whether runtime address a lies in one of the segments.
func (m *HostModule) Contains(a uint64) bool {
	for _, s := range m.Segments {
		if a >= s.Start && a-s.Start < s.Size {
			return true
		}
	}
	return false
}

// Dropped counts losses since the previous DROPPED frame: records (and
// their bytes) the library's host queue discarded, and PC samples the
// GPU's sampling hardware dropped (an optional trailing field, written
// only when not zero).
type Dropped struct{ Records, Bytes, PCSamples uint64 }

// End closes a stream.
type End struct {
	Frames   uint64 // frames written before this one, HELLO included
	ExitCode int32
}

func (*Hello) Kind() Kind        { return KindHello }
func (*Module) Kind() Kind       { return KindModule }
func (*Function) Kind() Kind     { return KindFunction }
func (*Launch) Kind() Kind       { return KindLaunch }
func (*Access) Kind() Kind       { return KindAccess }
func (*KernelEnd) Kind() Kind    { return KindKernelEnd }
func (*Alloc) Kind() Kind        { return KindAlloc }
func (*Free) Kind() Kind         { return KindFree }
func (*StallReasons) Kind() Kind { return KindStallReasons }
func (*PCSamples) Kind() Kind    { return KindPCSamples }
func (*InstrCounts) Kind() Kind  { return KindInstrCounts }
func (*HostModule) Kind() Kind   { return KindHostModule }
func (*Dropped) Kind() Kind      { return KindDropped }
func (*End) Kind() Kind          { return KindEnd }
