package blame

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// prog builds a Func from a SASS-like listing, one instruction per line:
//
//	[label:] [@[!]Pn] OPCODE dst, src, ... [{W0 R1 B01 S4}]
//
// The first register operand is the destination except for stores and
// branches; {W n} / {R n} set the write / read scoreboard, {B digits} the
// wait mask, {S n} the stall cycles. "BRA label" ends a block with a taken
// edge (and a fall-through edge when guarded); EXIT ends the function.
func prog(t *testing.T, src string) *Func {
	t.Helper()
	type line struct {
		label, guard, op string
		ops              []string
		ctl              string
	}
	var ls []line
	for _, raw := range strings.Split(src, "\n") {
		s := strings.TrimSpace(raw)
		if s == "" || strings.HasPrefix(s, "//") {
			continue
		}
		var l line
		if i := strings.Index(s, ":"); i >= 0 && !strings.Contains(s[:i], " ") {
			l.label, s = s[:i], strings.TrimSpace(s[i+1:])
		}
		if i := strings.Index(s, "{"); i >= 0 {
			l.ctl = strings.Trim(s[i:], "{} ")
			s = strings.TrimSpace(s[:i])
		}
		if strings.HasPrefix(s, "@") {
			i := strings.Index(s, " ")
			l.guard, s = s[1:i], strings.TrimSpace(s[i+1:])
		}
		op, rest, _ := strings.Cut(s, " ")
		l.op = op
		for _, o := range strings.Split(rest, ",") {
			if o = strings.TrimSpace(o); o != "" {
				l.ops = append(l.ops, o)
			}
		}
		ls = append(ls, l)
	}
	labels := map[string]int{}
	for i, l := range ls {
		if l.label != "" {
			labels[l.label] = i
		}
	}
	// Block leaders: the first instruction, labels, and after branches/exits.
	leader := map[int]bool{0: true}
	for i, l := range ls {
		if l.label != "" {
			leader[i] = true
		}
		base := strings.Split(l.op, ".")[0]
		if base == "BRA" || base == "EXIT" {
			leader[i+1] = true
		}
	}
	f := &Func{Name: "test"}
	var acc []RegAccess
	for i, l := range ls {
		base := strings.Split(l.op, ".")[0]
		in := Inst{Offset: uint32(i * 16), Op: l.op, Kind: kindOf(base), Guarded: l.guard != ""}
		in.Latency = latencyOf(in.Kind)
		a := RegAccess{WriteSB: -1, ReadSB: -1}
		if l.guard != "" {
			a.Uses = append(a.Uses, reg(strings.TrimPrefix(l.guard, "!")))
		}
		store := base == "STG" || base == "STS" || base == "STL" || base == "BRA" || base == "EXIT" || base == "BAR"
		for k, o := range l.ops {
			if strings.HasPrefix(o, "[") {
				in.Indirect = true
				for _, r := range strings.FieldsFunc(strings.Trim(o, "[]"), func(c rune) bool { return c == '+' || c == ' ' }) {
					if isReg(r) {
						a.Uses = append(a.Uses, reg(r))
					}
				}
				continue
			}
			if !isReg(o) {
				continue
			}
			if k == 0 && !store {
				a.Defs = append(a.Defs, reg(o))
			} else {
				a.Uses = append(a.Uses, reg(o))
			}
		}
		for _, c := range strings.Fields(l.ctl) {
			v := c[1:]
			switch c[0] {
			case 'W':
				a.WriteSB, _ = strconv.Atoi(v)
			case 'R':
				a.ReadSB, _ = strconv.Atoi(v)
			case 'B':
				for _, d := range v {
					a.Wait = append(a.Wait, int(d-'0'))
				}
			case 'S':
				in.Cycles, _ = strconv.Atoi(v)
			}
		}
		f.Insts = append(f.Insts, in)
		acc = append(acc, a)
	}
	// Blocks and edges.
	var starts []int
	for i := 0; i < len(ls); i++ {
		if leader[i] {
			starts = append(starts, i)
		}
	}
	blockAt := map[int]int{}
	for b, s := range starts {
		end := len(ls)
		if b+1 < len(starts) {
			end = starts[b+1]
		}
		f.Blocks = append(f.Blocks, Block{Start: s, End: end})
		blockAt[s] = b
	}
	for b := range f.Blocks {
		last := ls[f.Blocks[b].End-1]
		base := strings.Split(last.op, ".")[0]
		next, hasNext := blockAt[f.Blocks[b].End]
		switch base {
		case "EXIT":
			if last.guard != "" && hasNext {
				f.Blocks[b].Succs = append(f.Blocks[b].Succs, next)
			}
		case "BRA":
			target, ok := labels[last.ops[0]]
			if !ok {
				t.Fatalf("unknown label %q", last.ops[0])
			}
			f.Blocks[b].Succs = append(f.Blocks[b].Succs, blockAt[target])
			if last.guard != "" && hasNext {
				f.Blocks[b].Succs = append(f.Blocks[b].Succs, next)
			}
		default:
			if hasNext {
				f.Blocks[b].Succs = append(f.Blocks[b].Succs, next)
			}
		}
	}
	Link(f, acc)
	return f
}

func isReg(s string) bool {
	return len(s) > 1 && (s[0] == 'R' || s[0] == 'P') && s[1] >= '0' && s[1] <= '9'
}

func reg(s string) uint32 {
	n, err := strconv.Atoi(s[1:])
	if err != nil {
		panic(fmt.Sprintf("register %q", s))
	}
	if s[0] == 'P' {
		return 0x100 + uint32(n)
	}
	return uint32(n)
}

func kindOf(op string) Kind {
	switch op {
	case "LDG", "STG", "ATOMG", "RED":
		return KGlobalMem
	case "LDL", "STL":
		return KLocalMem
	case "LD", "ST":
		return KGenericMem
	case "LDS", "STS":
		return KSharedMem
	case "LDC":
		return KConstMem
	case "MUFU", "I2F", "F2I", "F2F":
		return KArithVar
	case "S2R":
		return KSpecial
	case "BAR", "MEMBAR":
		return KSync
	case "BRA", "EXIT", "CALL", "RET":
		return KControl
	case "FADD", "FMUL", "FFMA", "IADD3", "IMAD", "ISETP", "MOV", "LOP3", "SHF", "LEA":
		return KArithFixed
	}
	return KOther
}

func latencyOf(k Kind) int {
	if k == KArithFixed {
		return 4
	}
	return 0
}

// smp builds per-instruction samples: smp(n, i, "reason", v, ...).
func smp(n int, spec ...interface{}) []Samples {
	s := make([]Samples, n)
	for i := range s {
		s[i] = Samples{ByReason: map[string]float64{}, Executed: -1}
	}
	for k := 0; k+2 < len(spec); k += 3 {
		i := spec[k].(int)
		s[i].ByReason[spec[k+1].(string)] += float64(spec[k+2].(int))
	}
	return s
}
