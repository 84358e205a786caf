// Package symname turns symbol names into what a person reads: C++
// (Itanium ABI) names demangled in full, and a short form for narrow
// columns that only elides parameter and template argument lists. Every
// stage that shows a name (the analysis and all the viewers) uses it, so a
// kernel reads the same everywhere.
//
// Host symbols are kept whole whatever characters they contain: clang
// names lambdas and unnamed types "$_0", so '$' inside a symbol is part of
// it. Only nvdisasm's names of inlined GPU bodies, "$caller$callee" with
// every part mangled, are read as a chain of names.
package symname

import (
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// ShortLen is the length above which Short also elides template argument
// lists (innermost first).
const ShortLen = 64

// Ellipsis marks what Short left out.
const Ellipsis = "…"

// Demangling is slow next to the tables that repeat a few names many
// times, so results are kept.
var full, short sync.Map

// Demangle returns the readable form of a C++ symbol, parameters
// included, or name itself when it is not a mangled name (or cannot be
// demangled).
func Demangle(name string) string {
	if !strings.HasPrefix(name, "_Z") {
		return name
	}
	if d, ok := full.Load(name); ok {
		return d.(string)
	}
	// Filter never fails: it returns its input when it cannot demangle.
	d := demangle.Filter(name, demangle.NoClones)
	full.Store(name, d)
	return d
}

// Short returns a display form of a symbol: demangled, without its
// parameter list and return type, with template argument lists elided
// ("<…>") when longer than ShortLen. It never returns an empty last
// component: "ns::(anonymous namespace)::K(int)" is "ns::(anonymous
// namespace)::K". The full name is Demangle's.
func Short(name string) string {
	if name == "" {
		return ""
	}
	if s, ok := short.Load(name); ok {
		return s.(string)
	}
	s := shortName(name)
	short.Store(name, s)
	return s
}

func shortName(name string) string {
	if parts, ok := inlinedChain(name); ok {
		for i, p := range parts {
			parts[i] = Short(p)
		}
		return strings.Join(parts, " > ")
	}
	var forms []string
	if Demangle(name) != name {
		// The demangler's own tree knows where the name ends; text
		// scanning is only for names that arrive readable.
		for _, opts := range [][]demangle.Option{
			{demangle.NoParams, demangle.NoClones},
			{demangle.NoParams, demangle.NoClones, demangle.NoEnclosingParams},
		} {
			if d, err := demangle.ToString(name, opts...); err == nil {
				forms = append(forms, d)
			}
		}
		if len(forms) == 0 {
			forms = []string{stripSignature(Demangle(name))}
		}
	} else {
		forms = []string{stripSignature(name)}
	}
	best := forms[0]
	if len([]rune(best)) <= ShortLen {
		return guard(best, name)
	}
	for _, f := range forms {
		for depth := 2; depth >= 1; depth-- {
			e := ElideTemplates(f, depth)
			if len([]rune(e)) < len([]rune(best)) {
				best = e
			}
			if len([]rune(best)) <= ShortLen {
				return guard(best, name)
			}
		}
	}
	return guard(best, name)
}

// guard falls back to the whole demangled name when a shortened one would
// end in an empty component (a defect Short must never show).
func guard(s, name string) string {
	if LastComponent(s) != "" {
		return s
	}
	return Demangle(name)
}

// inlinedChain splits nvdisasm's "$caller$callee" name of an inlined GPU
// body; ok is false for any other name, '$' or not.
func inlinedChain(name string) ([]string, bool) {
	if !strings.HasPrefix(name, "$") {
		return nil, false
	}
	parts := strings.Split(name[1:], "$")
	if len(parts) < 2 {
		return nil, false
	}
	for _, p := range parts {
		if !strings.HasPrefix(p, "_Z") {
			return nil, false
		}
	}
	return parts, true
}

// LastComponent returns the part of a (demangled) qualified name after its
// last top-level "::", without template arguments: "" when there is none.
func LastComponent(s string) string {
	last := 0
	walk(s, func(i int, depth int) {
		if depth == 0 && strings.HasPrefix(s[i:], "::") {
			last = i + 2
		}
	})
	c := s[last:]
	if i := topLevelIndex(c, '<'); i >= 0 {
		c = c[:i]
	}
	return strings.TrimSpace(c)
}

// stripSignature drops the parameter list (and what follows it: cv and
// ref qualifiers) and the return type of an already demangled name.
func stripSignature(s string) string {
	s = strings.TrimSpace(s)
	// The parameter list is the last top-level parenthesised group that is
	// not part of the name, like "(anonymous namespace)".
	cut := -1
	walkGroups(s, func(open, close int) {
		inner := s[open+1 : close]
		if inner == "anonymous namespace" || !onlyQualifiers(s[close+1:]) {
			return
		}
		cut = open
	})
	if cut > 0 {
		s = strings.TrimSpace(s[:cut])
	}
	// The return type ends at the last top-level space before the name
	// (spaces inside "operator new" or a conversion operator belong to it).
	end := len(s)
	if i := operatorIndex(s); i >= 0 {
		end = i
	}
	sp := -1
	walk(s[:end], func(i, depth int) {
		if depth == 0 && s[i] == ' ' {
			sp = i
		}
	})
	if sp >= 0 && sp+1 < len(s) {
		s = s[sp+1:]
	}
	return s
}

// onlyQualifiers reports whether a name's tail after a parameter list is
// only qualifiers.
func onlyQualifiers(t string) bool {
	for _, f := range strings.Fields(t) {
		switch f {
		case "const", "volatile", "&", "&&", "noexcept", "restrict", "__restrict":
		default:
			if !strings.HasPrefix(f, "[clone") && !strings.HasPrefix(f, ".") && !strings.HasSuffix(f, "]") {
				return false
			}
		}
	}
	return true
}

// ElideTemplates replaces every template argument list nested depth or
// more deep (1: the outermost) by "<…>".
func ElideTemplates(s string, depth int) string {
	var b strings.Builder
	d := 0
	skipUntil := -1
	walkBytes(s, func(i int, c byte, op bool) {
		if op { // a byte of an operator name such as operator<
			if skipUntil < 0 {
				b.WriteByte(c)
			}
			return
		}
		switch c {
		case '<':
			d++
			if d == depth && skipUntil < 0 {
				b.WriteString("<" + Ellipsis)
				skipUntil = d
				return
			}
		case '>':
			if d == skipUntil {
				skipUntil = -1
				b.WriteByte('>')
				d--
				return
			}
			d--
		}
		if skipUntil < 0 {
			b.WriteByte(c)
		}
	})
	return b.String()
}

// walk calls f with each byte offset of s that is not part of an operator
// name, and the bracket depth there (all of <>, (), [], {}).
func walk(s string, f func(i, depth int)) {
	depth := 0
	walkBytes(s, func(i int, c byte, op bool) {
		if op {
			return
		}
		switch c {
		case '<', '(', '[', '{':
			f(i, depth)
			depth++
			return
		case '>', ')', ']', '}':
			if depth > 0 {
				depth--
			}
		}
		f(i, depth)
	})
}

// walkGroups calls f with the offsets of each top-level parenthesised
// group.
func walkGroups(s string, f func(open, close int)) {
	depth, open := 0, -1
	walkBytes(s, func(i int, c byte, op bool) {
		if op {
			return
		}
		switch c {
		case '<', '[', '{':
			depth++
		case '>', ']', '}':
			if depth > 0 {
				depth--
			}
		case '(':
			if depth == 0 {
				open = i
			}
			depth++
		case ')':
			if depth > 0 {
				depth--
			}
			if depth == 0 && open >= 0 {
				f(open, i)
				open = -1
			}
		}
	})
}

func topLevelIndex(s string, want byte) int {
	at := -1
	walk(s, func(i, depth int) {
		if at < 0 && depth == 0 && s[i] == want {
			at = i
		}
	})
	return at
}

// operatorIndex is the offset of the top-level "operator" keyword, or -1.
func operatorIndex(s string) int {
	for i := 0; i+8 <= len(s); i++ {
		if s[i:i+8] == "operator" && (i == 0 || !identByte(s[i-1])) && (i+8 == len(s) || !identByte(s[i+8])) {
			return i
		}
	}
	return -1
}

func identByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// operatorSymbols are the C++ operator names made of bracket characters,
// longest first.
var operatorSymbols = []string{"<<=", ">>=", "<=>", "->*", "()", "[]", "<<", ">>", "<=", ">=", "->", "<", ">"}

// walkBytes calls f for every byte of s, with op set for the bytes of an
// operator's symbol ("operator<", "operator()"), which are no brackets.
func walkBytes(s string, f func(i int, c byte, op bool)) {
	for i := 0; i < len(s); i++ {
		if s[i] == 'o' && strings.HasPrefix(s[i:], "operator") && (i == 0 || !identByte(s[i-1])) {
			j := i + len("operator")
			for k := i; k < j; k++ {
				f(k, s[k], false)
			}
			for j < len(s) && s[j] == ' ' {
				f(j, s[j], true)
				j++
			}
			for _, sym := range operatorSymbols {
				if strings.HasPrefix(s[j:], sym) {
					for k := j; k < j+len(sym); k++ {
						f(k, s[k], true)
					}
					j += len(sym)
					break
				}
			}
			i = j - 1
			continue
		}
		f(i, s[i], false)
	}
}
