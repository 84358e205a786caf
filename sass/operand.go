package sass

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// OperandKind classifies an operand.
type OperandKind uint8

// Operand kinds.
const (
	OperandOther   OperandKind = iota // enumerants (2D, 0x0 modes...) and unrecognised text, kept verbatim
	OperandReg                        // R, P, UR, UP, B or SB register
	OperandImm                        // integer immediate, printed by nvdisasm in hexadecimal
	OperandFloat                      // floating-point immediate, printed in decimal, INF or QNAN
	OperandConst                      // constant bank reference c[bank][addr]
	OperandMem                        // memory address [..], desc[UR][..]
	OperandSpecial                    // special register SR_*, SRZ
	OperandLabel                      // code label `(.L_x_0)
)

var operandKindNames = [...]string{"other", "reg", "imm", "float", "const", "mem", "special", "label"}

func (k OperandKind) String() string {
	if int(k) < len(operandKindNames) {
		return operandKindNames[k]
	}
	return fmt.Sprintf("OperandKind(%d)", k)
}

// Operand is one parsed operand of an instruction.
//
// For OperandConst and OperandMem the address parts are Base (a general
// register, Pair set when written R2.64), UBase (a uniform register) and
// Offset; Desc is the uniform register of a desc[URx] memory descriptor
// (alone, with no address, in tensor-memory copies);
// for constants Bank is the bank number and BankReg a uniform register
// holding it (cx[URx]).
type Operand struct {
	Kind OperandKind
	Text string // the operand as printed

	Reg   Reg    // OperandReg
	Neg   bool   // -R0
	Not   bool   // !P0
	Inv   bool   // ~R0
	Abs   bool   // |R0|
	Reuse bool   // .reuse: operand reuse cache hint
	Pair  bool   // .64 on a register: a 64-bit register pair
	Mods  string // other dot suffixes of a register, such as ".H1" or ".X4"

	Imm   int64   // OperandImm, and OperandFloat values that are integral
	Float float64 // OperandFloat

	Bank    int64 // OperandConst
	BankReg Reg   // OperandConst: cx[URx]
	Base    Reg   // OperandConst, OperandMem
	UBase   Reg   // OperandMem: uniform base or offset register
	Offset  int64 // OperandConst, OperandMem
	Desc    Reg   // OperandMem: desc[URx]

	Name string // OperandSpecial: SR_TID.X; OperandLabel: .L_x_0
}

func (o Operand) String() string { return o.Text }

// addrRegs appends to dst the tracked registers that a memory or constant
// operand reads to form its address (both halves of a .64 base and of a
// desc[URx] descriptor).
func (o *Operand) addrRegs(dst []Reg) []Reg {
	add := func(r Reg, pair bool) {
		if r.Tracked() {
			dst = append(dst, r)
			if pair && r.Index()+1 < zeroIndex {
				dst = append(dst, r+1)
			}
		}
	}
	switch o.Kind {
	case OperandMem:
		add(o.Base, o.Pair)
		add(o.UBase, false)
		add(o.Desc, true)
	case OperandConst:
		add(o.BankReg, false)
		add(o.Base, false)
		add(o.UBase, false)
	}
	return dst
}

// AddressRegs returns the tracked registers a memory instruction reads to
// form its memory operand's address (both halves of a .64 base and of a
// descriptor); nil for an instruction without one.
func (in *Instruction) AddressRegs() []Reg {
	var out []Reg
	for i := range in.Operands {
		if in.Operands[i].Kind == OperandMem {
			out = in.Operands[i].addrRegs(out)
		}
	}
	return out
}

// ParseOperand parses one operand token as nvdisasm prints it.
func ParseOperand(tok string) (Operand, error) {
	o := Operand{Text: tok}
	if tok == "" {
		return o, fmt.Errorf("empty operand")
	}
	s := tok
	if strings.HasPrefix(s, "`(") {
		if !strings.HasSuffix(s, ")") || len(s) < 4 {
			return o, fmt.Errorf("label %q: expected `(name)", tok)
		}
		o.Kind = OperandLabel
		o.Name = s[2 : len(s)-1]
		return o, nil
	}
	// Prefix operators. A '-' before a digit is the sign of an immediate.
	for len(s) > 0 {
		c := s[0]
		if c == '-' && len(s) > 1 && (s[1] < '0' || s[1] > '9') && !strings.HasPrefix(s[1:], "INF") && !strings.HasPrefix(s[1:], "QNAN") && !strings.HasPrefix(s[1:], "NAN") {
			o.Neg = !o.Neg
			s = s[1:]
			continue
		}
		if c == '!' {
			o.Not = !o.Not
			s = s[1:]
			continue
		}
		if c == '~' {
			o.Inv = !o.Inv
			s = s[1:]
			continue
		}
		break
	}
	if len(s) >= 2 && s[0] == '|' {
		end := strings.LastIndexByte(s, '|')
		if end <= 0 {
			return o, fmt.Errorf("operand %q: unterminated |abs|", tok)
		}
		o.Abs = true
		s = s[1:end] + s[end+1:]
	}
	if strings.Trim(s, "-+!~|") == "" {
		return o, fmt.Errorf("operand %q: operator without operand", tok)
	}
	switch {
	case strings.HasPrefix(s, "c[") || strings.HasPrefix(s, "cx["):
		return parseConst(o, s)
	case strings.HasPrefix(s, "desc[") || s[0] == '[':
		return parseMem(o, s)
	case strings.HasPrefix(s, "SR_") || s == "SRZ":
		o.Kind = OperandSpecial
		o.Name = s
		return o, nil
	}
	if r, mods, ok := parseRegToken(s); ok {
		o.Kind = OperandReg
		o.Reg = r
		applyRegMods(&o, mods)
		return o, nil
	}
	if v, ok := parseInt(s); ok {
		o.Kind = OperandImm
		o.Imm = v
		return o, nil
	}
	if f, ok := parseFloat(s); ok {
		o.Kind = OperandFloat
		o.Float = f
		if f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			o.Imm = int64(f)
		}
		return o, nil
	}
	o.Kind = OperandOther
	return o, nil
}

// parseRegToken splits "R2.64.reuse" into the register and its suffixes.
func parseRegToken(s string) (Reg, string, bool) {
	head, mods := s, ""
	if i := strings.IndexByte(s, '.'); i >= 0 {
		head, mods = s[:i], s[i:]
	}
	r, ok := ParseReg(head)
	return r, mods, ok
}

func applyRegMods(o *Operand, mods string) {
	for mods != "" {
		mods = mods[1:]
		m := mods
		if i := strings.IndexByte(mods, '.'); i >= 0 {
			m, mods = mods[:i], mods[i:]
		} else {
			mods = ""
		}
		switch m {
		case "reuse":
			o.Reuse = true
		case "64":
			o.Pair = true
		default:
			o.Mods += "." + m
		}
	}
}

// parseInt parses a hexadecimal immediate with optional sign.
func parseInt(s string) (int64, bool) {
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return 0, false
	}
	u, err := strconv.ParseUint(s[2:], 16, 64)
	if err != nil {
		return 0, false
	}
	v := int64(u)
	if neg {
		v = -v
	}
	return v, true
}

func parseFloat(s string) (float64, bool) {
	t := strings.TrimLeft(s, "+-")
	switch t {
	case "INF":
		if strings.HasPrefix(s, "-") {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case "QNAN", "NAN", "SNAN":
		return math.NaN(), true
	}
	if t == "" || t[0] < '0' || t[0] > '9' {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return f, true
}

// bracket returns the contents of the leading [...] of s and the rest.
func bracket(s string) (inner, rest string, ok bool) {
	if s == "" || s[0] != '[' {
		return "", s, false
	}
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
			if depth == 0 {
				return s[1:i], s[i+1:], true
			}
		}
	}
	return "", s, false
}

// parseAddr parses the inside of an address bracket: terms joined by '+'.
func parseAddr(o *Operand, inner string) error {
	if strings.TrimSpace(inner) == "" {
		return fmt.Errorf("empty address []")
	}
	for _, t := range strings.Split(inner, "+") {
		t = strings.TrimSpace(t)
		if t == "" {
			return fmt.Errorf("empty term in address [%s]", inner)
		}
		if v, ok := parseInt(t); ok {
			o.Offset += v
			continue
		}
		if v, ok := parseFloat(t); ok && v == math.Trunc(v) && math.Abs(v) < 1<<62 { // decimal offsets
			o.Offset += int64(v)
			continue
		}
		r, mods, ok := parseRegToken(t)
		if !ok {
			return fmt.Errorf("address term %q: expected a register or an immediate", t)
		}
		switch r.Kind() {
		case KindR:
			if o.Base != 0 {
				return fmt.Errorf("address [%s]: two general registers", inner)
			}
			o.Base = r
			for _, m := range strings.Split(mods, ".") {
				switch m {
				case "":
				case "64":
					o.Pair = true
				case "reuse":
					o.Reuse = true
				default:
					o.Mods += "." + m
				}
			}
		case KindUR:
			if o.UBase != 0 {
				return fmt.Errorf("address [%s]: two uniform registers", inner)
			}
			o.UBase = r
			if mods != "" {
				o.Mods += mods
			}
		default:
			return fmt.Errorf("address term %q: expected R or UR register", t)
		}
	}
	return nil
}

func parseMem(o Operand, s string) (Operand, error) {
	o.Kind = OperandMem
	if strings.HasPrefix(s, "desc[") {
		inner, rest, ok := bracket(s[4:])
		if !ok {
			return o, fmt.Errorf("operand %q: unterminated desc[", o.Text)
		}
		r, ok := ParseReg(inner)
		if !ok || r.Kind() != KindUR {
			return o, fmt.Errorf("operand %q: desc[] expects a uniform register", o.Text)
		}
		o.Desc = r
		s = rest
		if s == "" {
			// A descriptor alone: Hopper's tensor-memory copies name their
			// tensor map so (UTMALDG.4D [UR32], [UR6], desc[UR12]).
			return o, nil
		}
	}
	inner, rest, ok := bracket(s)
	if !ok {
		return o, fmt.Errorf("operand %q: expected [address]", o.Text)
	}
	if rest != "" {
		return o, fmt.Errorf("operand %q: unexpected %q after address", o.Text, rest)
	}
	if err := parseAddr(&o, inner); err != nil {
		return o, fmt.Errorf("operand %q: %v", o.Text, err)
	}
	return o, nil
}

func parseConst(o Operand, s string) (Operand, error) {
	o.Kind = OperandConst
	if strings.HasPrefix(s, "cx") {
		s = s[2:]
	} else {
		s = s[1:]
	}
	bank, rest, ok := bracket(s)
	if !ok {
		return o, fmt.Errorf("operand %q: expected c[bank][offset]", o.Text)
	}
	if v, ok := parseInt(bank); ok {
		o.Bank = v
	} else if r, ok := ParseReg(bank); ok && r.Kind() == KindUR {
		o.BankReg = r
	} else {
		return o, fmt.Errorf("operand %q: bank %q is neither an immediate nor a uniform register", o.Text, bank)
	}
	addr, rest, ok := bracket(rest)
	if !ok {
		return o, fmt.Errorf("operand %q: expected c[bank][offset]", o.Text)
	}
	if rest != "" {
		return o, fmt.Errorf("operand %q: unexpected %q after constant", o.Text, rest)
	}
	if err := parseAddr(&o, addr); err != nil {
		return o, fmt.Errorf("operand %q: %v", o.Text, err)
	}
	return o, nil
}

// splitOperands splits the operand text of one instruction at top-level
// commas and blanks (nvdisasm separates BRX R4 -0x1a0 and RET R6 `(f) by
// blanks only), keeping bracketed, braced and quoted parts whole.
func splitOperands(s string) ([]string, error) {
	var out []string
	depth := 0
	start := -1
	flush := func(i int) {
		if start >= 0 {
			out = append(out, s[start:i])
			start = -1
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '[', '(', '{':
			depth++
		case ']', ')', '}':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced %q in operands %q", c, s)
			}
		}
		if depth == 0 && (c == ',' || c == ' ' || c == '\t') {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced brackets in operands %q", s)
	}
	flush(len(s))
	return out, nil
}
