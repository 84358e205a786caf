package sass

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseProbe(t *testing.T) {
	m := mustParse(t, "probe/k.sass.txt")
	if m.Arch != "sm_90" {
		t.Errorf("Arch = %q", m.Arch)
	}
	type fn struct {
		name             string
		start, end, size uint64
		entry, global    bool
		insts            int
		section          string
	}
	want := []fn{
		{"_Z3shmPi", 0, 0x200, 0x200, true, true, 32, ".text._Z3shmPi"},
		{"_Z4vec4PK6float4PS_iPs", 0, 0x280, 0x280, true, true, 40, ".text._Z4vec4PK6float4PS_iPs"},
		{"_Z4fillPdi", 0, 0x180, 0x180, true, true, 24, ".text._Z4fillPdi"},
		{"_Z6reloadPKfPfii", 0, 0x5a0, 0x700, true, true, 90, ".text._Z6reloadPKfPfii"},
		{"$_Z6reloadPKfPfii$_Z6helperPKfi", 0x5a0, 0x700, 0x160, false, false, 22, ".text._Z6reloadPKfPfii"},
	}
	if len(m.Functions) != len(want) {
		t.Fatalf("%d functions, want %d", len(m.Functions), len(want))
	}
	for i, w := range want {
		f := m.Functions[i]
		got := fn{f.Name, f.Start, f.End, f.Size, f.Entry, f.Global, len(f.Insts), f.Section}
		if got != w {
			t.Errorf("function %d = %+v, want %+v", i, got, w)
		}
	}
	reload := m.Func("_Z6reloadPKfPfii")
	in := &reload.Insts[reload.InstAt(0xe0)]
	if in.Text() != "@!P0 BRA `(.L_x_3) ;" || in.Guard != MakeReg(KindP, 0) || !in.GuardNot || in.Flow != FlowBranch {
		t.Errorf("0xe0: %s guard %v not %v flow %v", in.Text(), in.Guard, in.GuardNot, in.Flow)
	}
	if !reflect.DeepEqual(in.Targets, []uint64{0x580}) {
		t.Errorf("0xe0 targets %#x, want [0x580]", in.Targets)
	}
	call := &reload.Insts[reload.InstAt(0x260)]
	if call.Flow != FlowCall || call.Callee != "$_Z6reloadPKfPfii$_Z6helperPKfi" {
		t.Errorf("0x260: flow %v callee %q", call.Flow, call.Callee)
	}
	if got := labelNames(reload.Labels); got != ".L_x_13@0x1e0 .L_x_6@0x280 .L_x_5@0x290 .L_x_8@0x320 .L_x_7@0x330 .L_x_10@0x3c0 .L_x_9@0x3d0 .L_x_12@0x460 .L_x_11@0x470 .L_x_4@0x490 .L_x_16@0x4b0 .L_x_15@0x530 .L_x_14@0x540 .L_x_3@0x580" {
		t.Errorf("labels: %s", got)
	}
	ldg := &reload.Insts[reload.InstAt(0x140)]
	if ldg.Opcode != "LDG.E.CONSTANT" || ldg.Op != "LDG" || !reflect.DeepEqual(ldg.Mods, []string{"E", "CONSTANT"}) {
		t.Errorf("0x140 opcode %q op %q mods %q", ldg.Opcode, ldg.Op, ldg.Mods)
	}
	if ldg.Mem != (MemInfo{Op: MemLoad, Space: SpaceGlobal, Bits: 32}) || ldg.ClassString() != "MEMORY.LOAD.GLOBAL.32" {
		t.Errorf("0x140 mem %+v class %s", ldg.Mem, ldg.ClassString())
	}
	if o := ldg.Operands[1]; o.Kind != OperandMem || o.Desc != MakeReg(KindUR, 8) || o.Base != MakeReg(KindR, 4) || !o.Pair {
		t.Errorf("0x140 memory operand %+v", o)
	}
	fsetp := &reload.Insts[reload.InstAt(0x210)]
	if o := fsetp.Operands[3]; o.Kind != OperandFloat || o.Float != 1e9 {
		t.Errorf("0x210 float operand %+v", o)
	}
	ret := &m.Func("$_Z6reloadPKfPfii$_Z6helperPKfi").Insts[8]
	if ret.Flow != FlowReturn || ret.Offset != 0x620 || ret.Callee != "" || len(ret.Targets) != 0 {
		t.Errorf("RET: %+v", ret)
	}
}

func labelNames(ls []Label) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.Name+"@0x"+uitoa16(l.Offset))
	}
	return strings.Join(s, " ")
}

func uitoa16(v uint64) string {
	const d = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = d[v&15]
		v >>= 4
	}
	s := strings.TrimLeft(string(b[:]), "0")
	if s == "" {
		return "0"
	}
	return s
}

func TestMemoryInfo(t *testing.T) {
	m := mustParse(t, "probe/k.hex.txt")
	cases := []struct {
		fn   string
		off  uint64
		want MemInfo
		cls  string
	}{
		{"_Z3shmPi", 0xa0, MemInfo{MemStore, SpaceShared, 32, false}, "MEMORY.STORE.SHARED.32"},
		{"_Z3shmPi", 0xd0, MemInfo{MemLoad, SpaceShared, 32, false}, "MEMORY.LOAD.SHARED.32"},
		{"_Z3shmPi", 0x90, MemInfo{MemLoad, SpaceConstant, 64, false}, "MEMORY.LOAD.CONSTANT.64"},
		{"_Z4vec4PK6float4PS_iPs", 0xe0, MemInfo{MemLoad, SpaceGlobal, 128, false}, "MEMORY.LOAD.GLOBAL.128"},
		{"_Z4vec4PK6float4PS_iPs", 0x180, MemInfo{MemStore, SpaceGlobal, 16, false}, "MEMORY.STORE.GLOBAL.16"},
		{"_Z4vec4PK6float4PS_iPs", 0x190, MemInfo{MemReduce, SpaceGlobal, 32, false}, "MEMORY.REDUCE.GLOBAL.32"},
		{"_Z4fillPdi", 0xd0, MemInfo{MemStore, SpaceGlobal, 64, false}, "MEMORY.STORE.GLOBAL.64"},
	}
	for _, c := range cases {
		f := m.Func(c.fn)
		in := &f.Insts[f.InstAt(c.off)]
		if in.Mem != c.want || in.ClassString() != c.cls {
			t.Errorf("%s+%#x %s: %+v %s, want %+v %s", c.fn, c.off, in.Text(), in.Mem, in.ClassString(), c.want, c.cls)
		}
	}
	c := mustParse(t, "cflow/c.sm90.hex.txt")
	more := map[string]MemInfo{
		"LDG.E.U8":                         {MemLoad, SpaceGlobal, 8, false},
		"LDG.E.S16":                        {MemLoad, SpaceGlobal, 16, false},
		"LDS.S8":                           {MemLoad, SpaceShared, 8, false},
		"STS.64":                           {MemStore, SpaceShared, 64, false},
		"STL":                              {MemStore, SpaceLocal, 32, false},
		"LD.E":                             {MemLoad, SpaceGeneric, 32, false},
		"ATOMS.POPC.INC.32":                {MemAtomic, SpaceShared, 32, false},
		"ATOMG.E.CAS.STRONG.GPU":           {MemAtomic, SpaceGlobal, 32, false},
		"REDG.E.ADD.F32.FTZ.RN.STRONG.GPU": {MemReduce, SpaceGlobal, 32, false},
		"LDGSTS.E.BYPASS.128":              {MemLoad, SpaceGlobal, 128, true},
		"LDS.128":                          {MemLoad, SpaceShared, 128, false},
	}
	seen := map[string]bool{}
	for _, f := range c.Functions {
		for i := range f.Insts {
			in := &f.Insts[i]
			if w, ok := more[in.Opcode]; ok {
				seen[in.Opcode] = true
				if in.Mem != w {
					t.Errorf("%s: %+v, want %+v", in.Opcode, in.Mem, w)
				}
			}
		}
	}
	if len(seen) != len(more) {
		t.Errorf("saw %d of %d opcodes", len(seen), len(more))
	}
}

// TestLineMap checks line entries and inlined call chains of one, three and
// four levels.
func TestLineMap(t *testing.T) {
	m := mustParse(t, "probe/k.sass.txt")
	loc, ok := m.LineAt("_Z4vec4PK6float4PS_iPs", 0xa0)
	if !ok || m.PosString(loc.Pos) != "/usr/local/cuda/bin/../targets/x86_64-linux/include/device_atomic_functions.hpp:107" ||
		len(loc.Calls) != 1 || m.PosString(loc.Calls[0]) != "testdata/sass/probe/k.cu:12" {
		t.Errorf("vec4+0xa0: %s calls %v", m.PosString(loc.Pos), loc.Calls)
	}
	// 0xb0 is back in the kernel's own line
	if loc, _ := m.LineAt("_Z4vec4PK6float4PS_iPs", 0xb0); len(loc.Calls) != 0 || loc.Line != 12 {
		t.Errorf("vec4+0xb0: %+v", loc)
	}
	// offsets are kernel-relative: the helper's first instruction
	if loc, _ := m.LineAt("_Z6reloadPKfPfii", 0x5a0); loc.Line != 3 {
		t.Errorf("reload+0x5a0: line %d, want 3", loc.Line)
	}
	c := mustParse(t, "cflow/c.sm90.sass.txt")
	chain := func(fn string, off uint64) string {
		l, ok := c.LineAt(fn, off)
		if !ok {
			return "none"
		}
		var s []string
		for _, p := range l.Calls {
			s = append(s, filepath.Base(c.File(p.File))+":"+itoa(int(p.Line)))
		}
		return strings.Join(s, " > ") + " | " + filepath.Base(c.File(l.File)) + ":" + itoa(int(l.Line))
	}
	// leaf inlined into mid inlined into top inlined into sw
	if got := chain("_Z2swPKiPfi", 0xa90); got != "c.cu:27 > c.cu:11 > c.cu:10 | c.cu:9" {
		t.Errorf("sw+0xa90: %s", got)
	}
	if got := chain("_Z5asyncPK6float4PS_", 0x20); got != "c.cu:130 > cuda_pipeline_primitives.h:69 > cuda_pipeline_helpers.h:292 > cuda_pipeline_helpers.h:219 | cuda_pipeline_helpers.h:203" {
		t.Errorf("async+0x20: %s", got)
	}
	// runtime subroutines have no line information of their own
	if got := chain("$__internal_0_$__cuda_sm20_sqrt_rn_f32_slowpath", 0); got != "none" {
		t.Errorf("sqrt slow path: %s", got)
	}
	frames := c.Location(c.Func("_Z5asyncPK6float4PS_").Insts[2].Loc).Frames()
	if len(frames) != 4 || c.File(frames[0].Callee) != "/usr/local/cuda/bin/../targets/x86_64-linux/include/cuda_pipeline_primitives.h" {
		t.Errorf("frames %+v", frames)
	}
}

// TestParseVariants: -g without -gi, -hex, whole-ELF output and four
// architectures parse to the same functions.
func TestParseVariants(t *testing.T) {
	text := mustParse(t, "probe/k.sass.txt")
	for _, name := range []string{"probe/k.hex.txt", "probe/k.full.txt"} {
		m := mustParse(t, name)
		if len(m.Functions) != len(text.Functions) {
			t.Fatalf("%s: %d functions", name, len(m.Functions))
		}
		for i, f := range m.Functions {
			g := text.Functions[i]
			if f.Name != g.Name || len(f.Insts) != len(g.Insts) || f.Size != g.Size {
				t.Errorf("%s: function %s/%d/%#x vs %s/%d/%#x", name, f.Name, len(f.Insts), f.Size, g.Name, len(g.Insts), g.Size)
				continue
			}
			for k := range f.Insts {
				if f.Insts[k].Text() != g.Insts[k].Text() {
					t.Errorf("%s: %s+%#x: %q vs %q", name, f.Name, f.Insts[k].Offset, f.Insts[k].Text(), g.Insts[k].Text())
				}
				if name == "probe/k.hex.txt" && !f.Insts[k].HasEnc {
					t.Errorf("%s+%#x: no encoding", f.Name, f.Insts[k].Offset)
				}
			}
		}
	}
	for _, arch := range []string{"sm80", "sm100", "sm120"} {
		for _, kind := range []string{"sass", "hex"} {
			m := mustParse(t, "probe/k."+arch+"."+kind+".txt")
			if m.Arch != "sm_"+arch[2:] {
				t.Errorf("%s: arch %q", arch, m.Arch)
			}
			var names []string
			for _, f := range m.Functions {
				names = append(names, f.Name)
			}
			if len(names) != 5 || m.Func("$_Z6reloadPKfPfii$_Z6helperPKfi") == nil {
				t.Errorf("%s: functions %v", arch, names)
			}
		}
	}
	if m := mustParse(t, "hpctoolkit-loops/loops.sass.txt"); m.Arch != "sm_80" || m.Func("_Z8kernmainv") == nil {
		t.Errorf("hpctoolkit sample: arch %q", m.Arch)
	}
}

func TestParseErrors(t *testing.T) {
	const head = ".section .text.f,\"ax\",@progbits\n.type f,@function\nf:\n"
	tests := []struct {
		text string
		line int
		msg  string
	}{
		{head + "/*0000*/ NOP\n", 4, "expected ';'"},
		{head + "/*zz*/ NOP ;\n", 4, "expected hexadecimal digits"},
		{head + "/*0010*/ NOP ;\n/*0000*/ NOP ;\n", 5, "does not follow"},
		{head + "/*0000*/ @Q0 NOP ;\n", 4, "guard"},
		{head + "/*0000*/ @R1 NOP ;\n", 4, "guard"},
		{head + "/*0000*/ 0x12 ;\n", 4, "expected an opcode"},
		{head + "/*0000*/ MOV R1, [R2 ;\n", 4, "unbalanced"},
		{head + "/*0000*/ MOV R1, c[0x0] ;\n", 4, "c[bank][offset]"},
		{head + "/*0000*/ BRA `(.L_x_9) ;\n", 4, "branch target .L_x_9 is not a label"},
		{head + "/*0000*/ NOP ; /* 0x0000000000007918 */\n/*0010*/ NOP ;\n", 5, "second encoding word"},
		{head + "/*0000*/ NOP ; /* 0x0000000000007918 */\n", 5, "end of the input"},
		{head + "/* 0x000fc00000000000 */\n", 4, "without an instruction"},
		{head + "/*0000*/ NOP ; /* 0xzz */\n/* 0x0 */\n", 4, "hex digits"},
		{head + "\t//## File \"k.cu\", line x\n/*0000*/ NOP ;\n", 4, "line number"},
		{head + "\t//## File k.cu, line 3\n", 4, `expected File "name"`},
		{head + "\t//## File \"k.cu\", line 3 inlined at \"g.cu\"\n", 4, "inlined at"},
		{head + "garbage here\n", 4, "expected an instruction"},
		{head + "/*0000*/ BRX R4 (*\"BRANCH_TARGETS .L_x_1 ;\n", 4, "unterminated (*"},
		{head + ".type\n", 4, "expected .type"},
		{head + ".size f\n", 4, "expected .size"},
		{head + ".type f\n", 4, "expected .type"},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(tc.text))
		if tc.msg == "" {
			if err != nil {
				t.Errorf("%q: unexpected error %v", tc.text, err)
			}
			continue
		}
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%q: error %v, want a *SyntaxError", tc.text, err)
			continue
		}
		if se.Line != tc.line || !strings.Contains(se.Msg, tc.msg) {
			t.Errorf("%q: line %d %q, want line %d containing %q", tc.text, se.Line, se.Msg, tc.line, tc.msg)
		}
		if !strings.Contains(se.Error(), "line "+itoa(tc.line)) {
			t.Errorf("Error() = %q does not name the line", se.Error())
		}
	}
}

// TestParseLenient: things nvdisasm may print that carry no structure are
// accepted: a bare instruction list, warnings, comments, dual-issue braces.
func TestParseLenient(t *testing.T) {
	m, err := Parse([]byte("nvdisasm warning : something\n/*0000*/ MOV R1, 0x1 ;\n{\n/*0010*/ EXIT ;\n}\n// a comment\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Functions) != 1 || len(m.Functions[0].Insts) != 2 || m.Functions[0].Name != ".text" {
		t.Errorf("functions %+v", m.Functions)
	}
	if _, err := Parse(nil); err != nil {
		t.Errorf("empty input: %v", err)
	}
}

// Hopper's tensor-memory copies name their tensor map by a descriptor
// alone, with no address (nvdisasm's listing of an XLA kernel under JAX):
// the function parses, so that its module is not disassembled whole.
func TestParseTensorMemoryCopy(t *testing.T) {
	const text = ".section .text.f,\"ax\",@progbits\n.type f,@function\nf:\n" +
		"        /*1410*/                   UTMALDG.4D [UR32], [UR6], desc[UR12] ;\n"
	m, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func("f")
	if f == nil || len(f.Insts) != 1 {
		t.Fatalf("functions %v", m.Functions)
	}
	in := f.Insts[0]
	if in.Opcode != "UTMALDG.4D" {
		t.Fatalf("opcode %q", in.Opcode)
	}
	ops := in.Operands
	if len(ops) != 3 || ops[2].Kind != OperandMem || ops[2].Desc != MakeReg(KindUR, 12) || ops[2].Base != 0 || ops[2].UBase != 0 {
		t.Errorf("operands %+v: want the third a descriptor UR12 with no address", ops)
	}
	if ops[1].UBase != MakeReg(KindUR, 6) || ops[0].UBase != MakeReg(KindUR, 32) {
		t.Errorf("operands %+v: want [UR32] and [UR6]", ops)
	}
}

// A subroutine the compiler copies into each calling kernel's section
// (here at other offsets, as CUDA's internal division routines are) has
// one name twice: Func finds the first, FuncIn each section's own.
func TestFuncInSection(t *testing.T) {
	text := `
	.section	.text.ka,"ax",@progbits
        .type           ka,@function
ka:
        /*0000*/                   CALL.REL.NOINC ` + "`" + `($__internal_0_$__div) ;
        /*0010*/                   EXIT ;
        .type           $__internal_0_$__div,@function
$__internal_0_$__div:
        /*0020*/                   RET.REL.NODEC R8 ` + "`" + `(ka) ;
	.section	.text.kb,"ax",@progbits
        .type           kb,@function
kb:
        /*0000*/                   NOP ;
        /*0010*/                   CALL.REL.NOINC ` + "`" + `($__internal_0_$__div) ;
        /*0020*/                   EXIT ;
        .type           $__internal_0_$__div,@function
$__internal_0_$__div:
        /*0030*/                   RET.REL.NODEC R8 ` + "`" + `(kb) ;
`
	m, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if f := m.Func("$__internal_0_$__div"); f == nil || f.Section != ".text.ka" {
		t.Fatalf("Func: %+v", f)
	}
	for sec, start := range map[string]uint64{".text.ka": 0x20, ".text.kb": 0x30} {
		if f := m.FuncIn(sec, "$__internal_0_$__div"); f == nil || f.Start != start {
			t.Errorf("FuncIn(%s): %+v, want the copy at %#x", sec, f, start)
		}
	}
	if f := m.FuncIn(".text.kc", "$__internal_0_$__div"); f != nil {
		t.Errorf("FuncIn of a section without it: %+v", f)
	}
}
