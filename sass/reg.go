package sass

import (
	"fmt"
	"strconv"
)

// RegKind is the register file a Reg belongs to.
type RegKind uint8

// Register files. KindSB is not an operand register: it models the six
// dependency scoreboards named by control bits and by DEPBAR.
const (
	KindNone RegKind = iota
	KindR            // general purpose registers R0..R254, RZ
	KindP            // predicates P0..P6, PT
	KindUR           // uniform registers UR0..UR254, URZ
	KindUP           // uniform predicates UP0..UP6, UPT
	KindB            // convergence barrier registers B0..B15 (BSSY/BSYNC/BREAK)
	KindSB           // scoreboards SB0..SB5
)

// Reg is a register in compact form: the file in the high byte and the index
// in the low byte. The zero Reg is "no register".
type Reg uint16

// Special indexes. RZ and URZ read as zero; PT and UPT read as true; none of
// them carries a dependency.
const (
	zeroIndex = 255
	trueIndex = 7
	prIndex   = 254 // PR/UPR: the whole predicate file, used by P2R/R2P
)

// Frequently used registers.
var (
	RZ  = MakeReg(KindR, zeroIndex)
	URZ = MakeReg(KindUR, zeroIndex)
	PT  = MakeReg(KindP, trueIndex)
	UPT = MakeReg(KindUP, trueIndex)
	PR  = MakeReg(KindP, prIndex)
	UPR = MakeReg(KindUP, prIndex)
)

// MakeReg returns the register of file k with index i.
func MakeReg(k RegKind, i int) Reg { return Reg(uint16(k)<<8 | uint16(uint8(i))) }

// Kind returns the register file.
func (r Reg) Kind() RegKind { return RegKind(r >> 8) }

// Index returns the register number within its file.
func (r Reg) Index() int { return int(r & 0xff) }

// Constant reports whether r is RZ, URZ, PT or UPT, which carry no dependency.
func (r Reg) Constant() bool {
	switch r.Kind() {
	case KindR, KindUR:
		return r.Index() == zeroIndex
	case KindP, KindUP:
		return r.Index() == trueIndex
	}
	return false
}

// Tracked reports whether r carries a data dependency (a real register, not
// RZ/PT and not "none").
func (r Reg) Tracked() bool { return r.Kind() != KindNone && !r.Constant() }

// String returns the nvdisasm spelling of r.
func (r Reg) String() string {
	i := r.Index()
	switch r.Kind() {
	case KindR:
		if i == zeroIndex {
			return "RZ"
		}
		return "R" + strconv.Itoa(i)
	case KindP:
		switch i {
		case trueIndex:
			return "PT"
		case prIndex:
			return "PR"
		}
		return "P" + strconv.Itoa(i)
	case KindUR:
		if i == zeroIndex {
			return "URZ"
		}
		return "UR" + strconv.Itoa(i)
	case KindUP:
		switch i {
		case trueIndex:
			return "UPT"
		case prIndex:
			return "UPR"
		}
		return "UP" + strconv.Itoa(i)
	case KindB:
		return "B" + strconv.Itoa(i)
	case KindSB:
		return "SB" + strconv.Itoa(i)
	case KindNone:
		return "-"
	}
	return fmt.Sprintf("reg(%#x)", uint16(r))
}

// ParseReg parses a bare register name such as "R12", "RZ", "P0", "PT",
// "UR4", "URZ", "UP1", "UPT", "B3", "SB0", "PR". It reports false for
// anything else.
func ParseReg(s string) (Reg, bool) {
	switch s {
	case "RZ":
		return RZ, true
	case "URZ":
		return URZ, true
	case "PT":
		return PT, true
	case "UPT":
		return UPT, true
	case "PR":
		return PR, true
	case "UPR":
		return UPR, true
	}
	var k RegKind
	var max int
	var num string
	switch {
	case len(s) > 2 && s[:2] == "UR":
		k, max, num = KindUR, 254, s[2:]
	case len(s) > 2 && s[:2] == "UP":
		k, max, num = KindUP, 6, s[2:]
	case len(s) > 2 && s[:2] == "SB":
		k, max, num = KindSB, 7, s[2:]
	case len(s) > 1 && s[0] == 'R':
		k, max, num = KindR, 254, s[1:]
	case len(s) > 1 && s[0] == 'P':
		k, max, num = KindP, 6, s[1:]
	case len(s) > 1 && s[0] == 'B':
		k, max, num = KindB, 15, s[1:]
	default:
		return 0, false
	}
	if len(num) > 3 || (len(num) > 1 && num[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(num); i++ {
		c := num[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > max {
		return 0, false
	}
	return MakeReg(k, n), true
}
