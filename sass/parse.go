package sass

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// SyntaxError reports malformed nvdisasm text.
type SyntaxError struct {
	Line int    // 1-based line number
	Text string // the offending line (shortened)
	Msg  string // what was wrong or expected
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("sass: line %d: %s: %q", e.Line, e.Msg, e.Text)
}

// maxLine bounds one input line; nvdisasm's longest lines are a few hundred
// bytes.
const maxLine = 1 << 16

// ParseReader reads all of r and parses it with Parse.
func ParseReader(r io.Reader) (*Module, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse parses the text output of nvdisasm for one cubin.
//
// It accepts the output of -c (code only) or of the whole ELF, with or
// without -g/-gi line information and with or without -hex encodings.
func Parse(text []byte) (*Module, error) {
	p := &parser{
		m:       &Module{},
		intern:  make(map[string]string),
		files:   make(map[string]int32),
		locs:    make(map[string]int32),
		curLoc:  -1,
		size:    16,
		opcodes: make(map[string]opcodeParts),
		opCache: make(map[string]Operand),
	}
	est := countInsts(text)
	p.insts = make([]Instruction, 0, est)
	p.opPool = make([]Operand, 0, 4*est+16) // four operands per instruction on average
	src := string(text)
	for len(src) > 0 {
		p.lineNo++
		var line string
		if i := strings.IndexByte(src, '\n'); i >= 0 {
			line, src = src[:i], src[i+1:]
		} else {
			line, src = src, ""
		}
		if len(line) > maxLine {
			return nil, p.errf(line[:80], "line longer than %d bytes", maxLine)
		}
		if err := p.line(line); err != nil {
			return nil, err
		}
	}
	p.lineNo++
	if p.wantHi {
		return nil, p.errf("", "expected the second encoding word of the last instruction, found the end of the input")
	}
	if err := p.endSection(); err != nil {
		return nil, err
	}
	p.m.index()
	return p.m, nil
}

type symInfo struct {
	function bool
	global   bool
	entry    bool
	size     string
	line     int
}

type labelRef struct {
	fn    *Function
	inst  int
	label string
	line  int
	call  bool
}

type section struct {
	name    string
	text    bool
	labels  map[string]uint64
	pending []string // labels waiting for the next instruction's offset
	funcs   []*Function
	cur     *Function
	newFunc string // function symbol whose label was seen; starts at the next instruction
	lastOff uint64
	haveOff bool
	refs    []labelRef
}

type lineEntry struct {
	file, atFile string
	line, atLine int
	inlined      bool
}

type parser struct {
	m      *Module
	intern map[string]string
	files  map[string]int32
	locs   map[string]int32
	syms   map[string]*symInfo
	sec    *section
	lineNo int
	group  []lineEntry
	curLoc int32
	size   uint64 // instruction size in bytes

	wantHi bool
	lastIn int // index into insts of the instruction awaiting its second encoding word

	// Instructions of all functions share one backing array (sized by a
	// first pass over the text) and operands come from chunks, to keep
	// allocation and GC work per instruction low.
	insts   []Instruction
	first   int // index in insts of the open function's first instruction
	open    *Function
	opPool  []Operand
	opcodes map[string]opcodeParts
	opCache map[string]Operand
}

type opcodeParts struct {
	op   string
	mods []string
}

// closeFunc hands the open function its instructions.
func (p *parser) closeFunc() {
	if p.open != nil {
		p.open.Insts = p.insts[p.first:len(p.insts):len(p.insts)]
		if len(p.open.Insts) == 0 {
			p.open.Insts = nil
		}
		p.open = nil
	}
	p.first = len(p.insts)
}

func (p *parser) operands(n int) []Operand {
	if cap(p.opPool)-len(p.opPool) < n {
		c := 1024
		if n > c {
			c = n
		}
		p.opPool = make([]Operand, 0, c)
	}
	l := len(p.opPool)
	p.opPool = p.opPool[:l+n]
	return p.opPool[l : l+n : l+n]
}

// countInsts estimates the number of instruction lines: lines whose first
// non-blank characters are "/*" followed by a hex digit.
func countInsts(text []byte) int {
	n := 0
	for i := 0; i+3 < len(text); i++ {
		if text[i] != '/' || text[i+1] != '*' {
			continue
		}
		c := text[i+2]
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'f' {
			j := i - 1
			for j >= 0 && (text[j] == ' ' || text[j] == '\t') {
				j--
			}
			if j < 0 || text[j] == '\n' {
				n++
			}
		}
	}
	return n
}

func (p *parser) errf(text, format string, args ...any) error {
	if len(text) > 160 {
		text = text[:160] + "..."
	}
	return &SyntaxError{Line: p.lineNo, Text: text, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) str(s string) string {
	if v, ok := p.intern[s]; ok {
		return v
	}
	s = strings.Clone(s)
	p.intern[s] = s
	return s
}

func (p *parser) sym(name string) *symInfo {
	if p.syms == nil {
		p.syms = make(map[string]*symInfo)
	}
	s := p.syms[name]
	if s == nil {
		s = &symInfo{line: p.lineNo}
		p.syms[name] = s
	}
	return s
}

func (p *parser) line(raw string) error {
	s := strings.TrimSpace(raw)
	if p.wantHi {
		if !isHexWordLine(s) {
			return p.errf(raw, "expected the second encoding word /* 0x...*/ of the instruction on the line before")
		}
		v, err := hexWord(s)
		if err != nil {
			return p.errf(raw, "%v", err)
		}
		in := &p.insts[p.lastIn]
		in.Enc[1] = v
		in.HasEnc = true
		p.wantHi = false
		return nil
	}
	switch {
	case s == "":
		return nil
	case strings.HasPrefix(s, "//##"):
		e, err := parseLineEntry(s)
		if err != nil {
			return p.errf(raw, "%v", err)
		}
		p.group = append(p.group, e)
		return nil
	case strings.HasPrefix(s, "//"):
		return nil
	case strings.HasPrefix(s, "/*"):
		return p.instLine(raw, s)
	case s[0] == '.' && !strings.HasSuffix(s, ":"):
		return p.directive(raw, s)
	case strings.HasSuffix(s, ":"):
		return p.label(raw, s[:len(s)-1])
	case s == "{" || s == "}":
		return nil // dual-issue braces of older architectures
	}
	if p.sec == nil || !p.sec.text {
		return nil
	}
	return p.errf(raw, "expected an instruction /*offset*/, a label, a directive or a //## line")
}

func isHexWordLine(s string) bool {
	return strings.HasPrefix(s, "/* 0x") && strings.HasSuffix(s, "*/")
}

func hexWord(s string) (uint64, error) {
	t := strings.TrimSpace(s[2 : len(s)-2])
	if !strings.HasPrefix(t, "0x") {
		return 0, fmt.Errorf("encoding word %q: expected 0x followed by hex digits", t)
	}
	v, err := strconv.ParseUint(t[2:], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("encoding word %q: expected at most 16 hex digits", t)
	}
	return v, nil
}

// directive handles .section, .target, .type, .size, .global, .other...
func (p *parser) directive(raw, s string) error {
	name, args := s, ""
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		name, args = s[:i], strings.TrimSpace(s[i+1:])
	}
	switch name {
	case ".target":
		fs := strings.Fields(args)
		if len(fs) == 0 {
			return p.errf(raw, "expected .target sm_NN")
		}
		p.m.Arch = p.str(fs[0])
		if n := archNumber(p.m.Arch); n > 0 && n < 70 {
			p.size = 8
		}
	case ".headerflags":
		// @"EF_CUDA_TEXMODE_UNIFIED ... EF_CUDA_SM80 ..." when there is no .target
		if p.m.Arch == "" {
			if i := strings.Index(args, "EF_CUDA_SM"); i >= 0 {
				n := 0
				for _, c := range args[i+len("EF_CUDA_SM"):] {
					if c < '0' || c > '9' {
						break
					}
					n = n*10 + int(c-'0')
				}
				if n > 0 && n < 10000 {
					p.m.Arch = p.str("sm_" + itoa(n))
				}
			}
		}
	case ".section":
		if err := p.endSection(); err != nil {
			return err
		}
		parts := strings.SplitN(args, ",", 3)
		sname := strings.TrimSpace(parts[0])
		if sname == "" {
			return p.errf(raw, "expected a section name after .section")
		}
		text := strings.HasPrefix(sname, ".text")
		if len(parts) > 1 {
			text = strings.Contains(strings.Trim(parts[1], " \""), "x")
		}
		p.sec = &section{name: p.str(sname), text: text, labels: make(map[string]uint64)}
		p.curLoc = -1
		p.group = p.group[:0]
	case ".global", ".weak":
		if args != "" {
			p.sym(strings.Fields(args)[0]).global = name == ".global"
		}
	case ".type":
		sym, val, ok := strings.Cut(args, ",")
		if !ok {
			return p.errf(raw, "expected .type name,@kind")
		}
		if strings.TrimSpace(val) == "@function" {
			p.sym(strings.TrimSpace(sym)).function = true
		}
	case ".size":
		sym, val, ok := strings.Cut(args, ",")
		if !ok {
			return p.errf(raw, "expected .size name,expression")
		}
		p.sym(strings.TrimSpace(sym)).size = strings.TrimSpace(val)
	case ".other":
		sym, val, ok := strings.Cut(args, ",")
		if !ok {
			return p.errf(raw, "expected .other name,@\"attributes\"")
		}
		if strings.Contains(val, "STO_CUDA_ENTRY") {
			p.sym(strings.TrimSpace(sym)).entry = true
		}
	}
	return nil
}

func archNumber(arch string) int {
	t := strings.TrimPrefix(arch, "sm_")
	n := 0
	for i := 0; i < len(t) && t[i] >= '0' && t[i] <= '9'; i++ {
		n = n*10 + int(t[i]-'0')
	}
	return n
}

func (p *parser) label(raw, name string) error {
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, " \t") {
		if p.sec != nil && p.sec.text {
			return p.errf(raw, "expected a label name before ':'")
		}
		return nil
	}
	if p.sec == nil || !p.sec.text {
		return nil
	}
	sec := p.sec
	sec.pending = append(sec.pending, p.str(name))
	if si := p.syms[name]; si != nil && si.function {
		sec.newFunc = name
		// Line information does not carry over from one function to the
		// next: runtime subroutines without -lineinfo have none.
		p.curLoc = -1
	}
	return nil
}

func (p *parser) implicitSection() {
	p.sec = &section{name: ".text", text: true, labels: make(map[string]uint64)}
}

func (p *parser) instLine(raw, s string) error {
	end := strings.Index(s[2:], "*/")
	if end < 0 {
		return p.errf(raw, "expected */ after the instruction offset")
	}
	end += 2
	inner := s[2:end]
	if strings.HasPrefix(inner, " ") {
		if isHexWordLine(s) {
			return p.errf(raw, "encoding word without an instruction before it")
		}
		return nil // a comment
	}
	rest := strings.TrimSpace(s[end+2:])
	if p.sec == nil {
		if strings.HasPrefix(rest, ".") {
			return nil
		}
		p.implicitSection()
	}
	if !p.sec.text || strings.HasPrefix(rest, ".") {
		return nil // data in non-code sections, or a data directive
	}
	off, err := strconv.ParseUint(inner, 16, 64)
	if err != nil {
		return p.errf(raw, "instruction offset %q: expected hexadecimal digits", inner)
	}
	sec := p.sec
	if sec.haveOff && off <= sec.lastOff {
		return p.errf(raw, "offset %#x does not follow the previous offset %#x", off, sec.lastOff)
	}
	sec.lastOff, sec.haveOff = off, true

	var lo uint64
	hasLo := false
	if i := strings.Index(rest, "/* 0x"); i >= 0 {
		w := strings.TrimSpace(rest[i:])
		if !strings.HasSuffix(w, "*/") {
			return p.errf(raw, "expected */ after the encoding word")
		}
		lo, err = hexWord(w)
		if err != nil {
			return p.errf(raw, "%v", err)
		}
		hasLo = true
		rest = strings.TrimSpace(rest[:i])
	}
	in, refs, err := p.parseInst(rest)
	if err != nil {
		return p.errf(raw, "%v", err)
	}
	in.Offset = off
	in.Line = p.lineNo
	if hasLo {
		in.Enc[0] = lo
	}
	// Line map: the //## lines before this instruction.
	if len(p.group) > 0 {
		p.curLoc = p.location(p.group)
		p.group = p.group[:0]
	}
	in.Loc = p.curLoc

	// Function boundaries and labels.
	if sec.newFunc != "" || sec.cur == nil {
		name := sec.newFunc
		if name == "" {
			name = strings.TrimPrefix(sec.name, ".text.")
		}
		f := &Function{Name: p.str(name), Section: sec.name, Start: off}
		if si := p.syms[name]; si != nil {
			f.Entry, f.Global = si.entry, si.global
		}
		p.closeFunc()
		p.open = f
		sec.funcs = append(sec.funcs, f)
		sec.cur = f
		sec.newFunc = ""
	}
	for _, l := range sec.pending {
		sec.labels[l] = off
	}
	sec.pending = sec.pending[:0]

	f := sec.cur
	p.insts = append(p.insts, in)
	idx := len(p.insts) - 1 - p.first
	for _, r := range refs {
		r.fn, r.inst, r.line = f, idx, p.lineNo
		sec.refs = append(sec.refs, r)
	}
	p.lastIn = len(p.insts) - 1
	p.wantHi = hasLo
	return nil
}

// parseInst parses "[@P0] OPCODE operands... [(*notes*)] ;".
func (p *parser) parseInst(s string) (Instruction, []labelRef, error) {
	in := Instruction{Loc: -1}
	s = strings.TrimSpace(strings.TrimPrefix(s, "{"))
	if !strings.HasSuffix(s, ";") {
		return in, nil, fmt.Errorf("expected ';' at the end of the instruction")
	}
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(s, ";"), "}"))
	if strings.HasPrefix(s, "@") {
		g, rest, _ := strings.Cut(s, " ")
		g = g[1:]
		if strings.HasPrefix(g, "!") {
			in.GuardNot = true
			g = g[1:]
		}
		r, ok := ParseReg(g)
		if !ok || (r.Kind() != KindP && r.Kind() != KindUP) {
			return in, nil, fmt.Errorf("guard %q: expected @P0..@P6, @PT, @UP0..@UP6 or @UPT, optionally negated with !", "@"+g)
		}
		in.Guard = r
		s = strings.TrimSpace(rest)
	}
	op, ops, _ := strings.Cut(s, " ")
	if op == "" || op[0] < 'A' || op[0] > 'Z' {
		return in, nil, fmt.Errorf("expected an opcode, found %q", op)
	}
	for i := 0; i < len(op); i++ {
		c := op[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_') {
			return in, nil, fmt.Errorf("opcode %q: unexpected character %q", op, c)
		}
	}
	in.Opcode = p.str(op)
	parts, ok := p.opcodes[in.Opcode]
	if !ok {
		ss := strings.Split(in.Opcode, ".")
		parts.op = p.str(ss[0])
		if len(ss) > 1 {
			parts.mods = make([]string, len(ss)-1)
			for i, m := range ss[1:] {
				parts.mods[i] = p.str(m)
			}
		}
		p.opcodes[in.Opcode] = parts
	}
	// Mods is shared by all instructions with this opcode.
	in.Op, in.Mods = parts.op, parts.mods
	// (*"..."*) annotations
	for {
		i := strings.Index(ops, "(*")
		if i < 0 {
			break
		}
		j := strings.Index(ops[i+2:], "*)")
		if j < 0 {
			return in, nil, fmt.Errorf("unterminated (* annotation")
		}
		note := strings.Trim(ops[i+2:i+2+j], "\" ")
		in.Notes = append(in.Notes, p.str(note))
		ops = ops[:i] + ops[i+2+j+2:]
	}
	toks, err := splitOperands(strings.TrimSpace(ops))
	if err != nil {
		return in, nil, err
	}
	var refs []labelRef
	if len(toks) > 0 {
		in.Operands = p.operands(len(toks))
	}
	for i, t := range toks {
		// Operand texts repeat a lot (RZ, PT, c[0x0][0x28]): parse each once.
		o, ok := p.opCache[t]
		if !ok {
			var err error
			o, err = ParseOperand(t)
			if err != nil {
				return in, nil, err
			}
			o.Text = strings.Clone(o.Text)
			if o.Name != "" {
				o.Name = p.str(o.Name)
			}
			if o.Mods != "" {
				o.Mods = p.str(o.Mods)
			}
			p.opCache[o.Text] = o
		}
		in.Operands[i] = o
	}
	in.Class, in.Flow, in.Mem = classify(in.Op, in.Mods, in.Operands)
	switch in.Flow {
	case FlowBranch, FlowCall:
		if in.Flow == FlowCall && in.indirectCall() {
			// CALL R2 `(kernel): the label only names the caller
			break
		}
		for _, o := range in.Operands {
			if o.Kind == OperandLabel {
				refs = append(refs, labelRef{label: o.Name, call: in.Flow == FlowCall})
			}
		}
	case FlowIndirect:
		for _, n := range in.Notes {
			if t, ok := strings.CutPrefix(n, "BRANCH_TARGETS "); ok {
				for _, l := range strings.Split(t, ",") {
					if l = strings.TrimSpace(l); l != "" {
						refs = append(refs, labelRef{label: p.str(l)})
					}
				}
			}
		}
	}
	return in, refs, nil
}

// parseLineEntry parses
//
//	//## File "f.cu", line 12
//	//## File "g.h", line 3 inlined at "f.cu", line 12
func parseLineEntry(s string) (lineEntry, error) {
	var e lineEntry
	s = strings.TrimSpace(strings.TrimPrefix(s, "//##"))
	file, line, rest, err := fileLine(s)
	if err != nil {
		return e, err
	}
	e.file, e.line = file, line
	rest = strings.TrimSpace(rest)
	if r, ok := strings.CutPrefix(rest, "inlined at "); ok {
		f2, l2, _, err := fileLine("File " + strings.TrimSpace(r))
		if err != nil {
			return e, fmt.Errorf("after \"inlined at\": %v", err)
		}
		e.atFile, e.atLine, e.inlined = f2, l2, true
	}
	return e, nil
}

// fileLine parses `File "name", line N` and returns what follows.
func fileLine(s string) (string, int, string, error) {
	r, ok := strings.CutPrefix(s, "File \"")
	if !ok {
		return "", 0, "", fmt.Errorf(`expected File "name", line N`)
	}
	q := strings.IndexByte(r, '"')
	if q < 0 {
		return "", 0, "", fmt.Errorf("unterminated file name")
	}
	file := r[:q]
	r, ok = strings.CutPrefix(r[q+1:], ", line ")
	if !ok {
		return "", 0, "", fmt.Errorf(`expected ", line N" after the file name`)
	}
	n := 0
	i := 0
	for ; i < len(r) && r[i] >= '0' && r[i] <= '9'; i++ {
		if n > 1<<30 {
			return "", 0, "", fmt.Errorf("line number too large")
		}
		n = n*10 + int(r[i]-'0')
	}
	if i == 0 {
		return "", 0, "", fmt.Errorf("expected a line number after \"line\"")
	}
	rest := r[i:]
	// tolerate ", column N" and similar suffixes
	if strings.HasPrefix(rest, ",") {
		if j := strings.Index(rest, " inlined at "); j >= 0 {
			rest = rest[j:]
		} else {
			rest = ""
		}
	}
	return file, n, rest, nil
}

func (p *parser) file(name string) int32 {
	if i, ok := p.files[name]; ok {
		return i
	}
	i := int32(len(p.m.Files))
	name = strings.Clone(name)
	p.m.Files = append(p.m.Files, name)
	p.files[name] = i
	return i
}

// location turns a group of //## lines into a Location index. A group is
// the innermost position with its "inlined at" call site, then the caller's
// position with its call site, and so on, ending with the outermost
// function's own line (without "inlined at"). Several complete records in
// one group are possible in principle; the last one wins.
func (p *parser) location(g []lineEntry) int32 {
	start := 0
	for i := 0; i < len(g)-1; i++ {
		if !g[i].inlined {
			start = i + 1
		}
	}
	rec := g[start:]
	l := Location{Pos: Pos{File: p.file(rec[0].file), Line: int32(rec[0].line)}}
	for _, e := range rec {
		if !e.inlined {
			break
		}
		l.Calls = append(l.Calls, Pos{File: p.file(e.atFile), Line: int32(e.atLine)})
	}
	for i, j := 0, len(l.Calls)-1; i < j; i, j = i+1, j-1 {
		l.Calls[i], l.Calls[j] = l.Calls[j], l.Calls[i]
	}
	return p.internLoc(l)
}

func locKey(l Location) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d:%d", l.File, l.Line)
	for _, c := range l.Calls {
		fmt.Fprintf(&sb, "<%d:%d", c.File, c.Line)
	}
	return sb.String()
}

func (p *parser) internLoc(l Location) int32 {
	k := locKey(l)
	if i, ok := p.locs[k]; ok {
		return i
	}
	i := int32(len(p.m.Locations))
	p.m.Locations = append(p.m.Locations, l)
	p.locs[k] = i
	return i
}

// endSection resolves labels, function extents and sizes of the current
// section and moves its functions to the module.
func (p *parser) endSection() error {
	sec := p.sec
	p.sec = nil
	if sec == nil || !sec.text {
		return nil
	}
	p.closeFunc()
	end := uint64(0)
	if sec.haveOff {
		end = sec.lastOff + p.size
	}
	for _, l := range sec.pending {
		sec.labels[l] = end
	}
	if sec.newFunc != "" { // a function symbol with no code
		f := &Function{Name: p.str(sec.newFunc), Section: sec.name, Start: end}
		if si := p.syms[sec.newFunc]; si != nil {
			f.Entry, f.Global = si.entry, si.global
		}
		sec.funcs = append(sec.funcs, f)
	}
	for i, f := range sec.funcs {
		f.End = end
		if i+1 < len(sec.funcs) {
			f.End = sec.funcs[i+1].Start
		}
		f.Size = f.End - f.Start
		if si := p.syms[f.Name]; si != nil && si.size != "" {
			if v, ok := p.evalSize(si.size, f, sec); ok {
				f.Size = v
			}
		}
	}
	// Code labels go to the function whose code they start; symbol and
	// section labels are not kept.
	var names []string
	for l := range sec.labels {
		if si := p.syms[l]; (si != nil && si.function) || l == sec.name {
			continue
		}
		names = append(names, l)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := sec.labels[names[i]], sec.labels[names[j]]
		if a != b {
			return a < b
		}
		return names[i] < names[j]
	})
	for _, l := range names {
		off := sec.labels[l]
		for _, f := range sec.funcs {
			if f.Start <= off && off < f.End {
				f.Labels = append(f.Labels, Label{Name: l, Offset: off})
				break
			}
		}
	}
	for _, r := range sec.refs {
		in := &r.fn.Insts[r.inst]
		if r.call {
			in.Callee = r.label
			continue
		}
		off, ok := sec.labels[r.label]
		if !ok {
			p.lineNo = r.line
			return &SyntaxError{Line: r.line, Text: in.Text(), Msg: fmt.Sprintf("branch target %s is not a label of section %s", r.label, sec.name)}
		}
		in.Targets = append(in.Targets, off)
	}
	p.m.Functions = append(p.m.Functions, sec.funcs...)
	return nil
}

// evalSize evaluates ".size f,(.L_x_19 - f)" or ".size f,0x40".
func (p *parser) evalSize(expr string, f *Function, sec *section) (uint64, bool) {
	if v, ok := parseInt(expr); ok && v >= 0 {
		return uint64(v), true
	}
	e := strings.Trim(expr, "() ")
	a, b, ok := strings.Cut(e, " - ")
	if !ok {
		return 0, false
	}
	la, oka := sec.labels[strings.TrimSpace(a)]
	lb, okb := sec.labels[strings.TrimSpace(b)]
	if strings.TrimSpace(b) == f.Name {
		lb, okb = f.Start, true
	}
	if !oka || !okb || la < lb {
		return 0, false
	}
	return la - lb, true
}
