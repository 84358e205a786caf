package sass

import (
	"fmt"
	"strings"
)

// Control is the scheduling information that Volta and later GPUs carry in
// every 128-bit instruction (bits 105-125, i.e. bits 41-61 of the high
// 64-bit word):
//
//	bits 41-44  stall cycles before the next instruction issues (0-15)
//	bit  45     yield hint
//	bits 46-48  write scoreboard set by a variable-latency producer (7: none)
//	bits 49-51  read scoreboard released when the sources are read (7: none)
//	bits 52-57  wait mask: scoreboards to wait on before issue
//	bits 58-61  operand reuse cache flags (one per source slot)
//
// A consumer of a variable-latency result waits on the scoreboard that the
// producer set: that link is what GPA's stall blamer follows.
type Control struct {
	Stall        uint8 // stall cycles
	Yield        bool  // the yield bit as encoded
	WriteBarrier int8  // scoreboard 0-5 set on completion of the write; -1 for none
	ReadBarrier  int8  // scoreboard 0-5 set once the sources are read; -1 for none
	WaitMask     uint8 // bit i: wait for scoreboard i
	Reuse        uint8 // bit i: keep source slot i in the reuse cache
}

// DecodeControl extracts the control bits from the high 64-bit word of a
// Volta+ instruction encoding.
func DecodeControl(hi uint64) Control {
	b := func(v uint64) int8 {
		if v == 7 {
			return -1
		}
		return int8(v)
	}
	return Control{
		Stall:        uint8(hi >> 41 & 0xf),
		Yield:        hi>>45&1 == 1,
		WriteBarrier: b(hi >> 46 & 7),
		ReadBarrier:  b(hi >> 49 & 7),
		WaitMask:     uint8(hi >> 52 & 0x3f),
		Reuse:        uint8(hi >> 58 & 0xf),
	}
}

// Waits reports whether the instruction waits on scoreboard sb.
func (c Control) Waits(sb int) bool { return sb >= 0 && sb < 6 && c.WaitMask&(1<<sb) != 0 }

// VariableLatency reports whether the instruction sets a scoreboard, which
// ptxas does exactly for variable-latency instructions.
func (c Control) VariableLatency() bool { return c.WriteBarrier >= 0 || c.ReadBarrier >= 0 }

// String renders the control bits in the CuAssembler style:
// wait mask, read scoreboard, write scoreboard, yield, stall, e.g.
// "B0-----:R-:W1:Y:S04".
func (c Control) String() string {
	var sb strings.Builder
	sb.WriteByte('B')
	for i := 0; i < 6; i++ {
		if c.Waits(i) {
			sb.WriteByte(byte('0' + i))
		} else {
			sb.WriteByte('-')
		}
	}
	bar := func(v int8) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprint(v)
	}
	y := "-"
	if c.Yield {
		y = "Y"
	}
	fmt.Fprintf(&sb, ":R%s:W%s:%s:S%02d", bar(c.ReadBarrier), bar(c.WriteBarrier), y, c.Stall)
	return sb.String()
}
