package sass

import (
	"bytes"
	"sort"
)

// Listings by section. nvdisasm prints a module's code one section after
// another, each opened by its .section directive (after a
// "//----- .text.NAME -----" comment); a kernel's section also holds the
// subroutines ptxas placed after it. Asked for some functions only
// (--cuda-function-index), it prints their sections exactly as the whole
// listing would. So listings made apart, for different functions of one
// module, join into one listing of those functions, section by section:
// that is how a module's listing grows function by function
// (docs/sass.md, "Function by function").

// ListingSection is one section of an nvdisasm listing: its name (such as
// ".text._Z3fooPf") and its text, from its banner comment or .section line
// to the next section's.
type ListingSection struct {
	Name string
	Text []byte
}

const sectionBanner = "//-----"

// SplitListing cuts nvdisasm text into the header (what comes before the
// first section: .headerflags, .elftype, .target) and its sections, in
// order. The pieces share text's memory.
func SplitListing(text []byte) (header []byte, secs []ListingSection) {
	start := -1  // start of the current section's text
	name := ""   // its name
	banner := -1 // start of a banner line not yet followed by .section
	for pos := 0; pos < len(text); {
		end := bytes.IndexByte(text[pos:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += pos + 1
		}
		line := bytes.TrimSpace(text[pos:end])
		switch {
		case bytes.HasPrefix(line, []byte(sectionBanner)):
			banner = pos
		case bytes.HasPrefix(line, []byte(".section")) && (len(line) == 8 || line[8] == ' ' || line[8] == '\t'):
			at := pos
			if banner >= 0 {
				at = banner
			}
			if start < 0 {
				header = text[:at]
			} else {
				secs = append(secs, ListingSection{Name: name, Text: text[start:at]})
			}
			start, name = at, sectionName(line)
			banner = -1
		case len(line) > 0:
			banner = -1
		}
		pos = end
	}
	if start < 0 {
		return text, nil
	}
	secs = append(secs, ListingSection{Name: name, Text: text[start:]})
	return header, secs
}

// sectionName reads the name from a ".section NAME,flags,type" line.
func sectionName(line []byte) string {
	rest := bytes.TrimSpace(line[len(".section"):])
	if i := bytes.IndexByte(rest, ','); i >= 0 {
		rest = rest[:i]
	}
	return string(bytes.TrimSpace(rest))
}

// JoinListing makes one listing of a header and sections, keeping the
// first of sections with the same name (two functions' listings that
// share a callee both hold its section), in order of name so that any
// order of joining gives the same text.
func JoinListing(header []byte, secs []ListingSection) []byte {
	seen := make(map[string]bool, len(secs))
	keep := make([]ListingSection, 0, len(secs))
	n := len(header)
	for _, s := range secs {
		if seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		keep = append(keep, s)
		n += len(s.Text) + 1
	}
	sort.SliceStable(keep, func(i, j int) bool { return keep[i].Name < keep[j].Name })
	out := make([]byte, 0, n)
	out = append(out, header...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	for _, s := range keep {
		out = append(out, s.Text...)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
	}
	return out
}

// JoinListings joins whole listings (of one module) into one: the first
// one's header and every section once.
func JoinListings(texts ...[]byte) []byte {
	var header []byte
	var secs []ListingSection
	for i, t := range texts {
		h, s := SplitListing(t)
		if i == 0 {
			header = h
		}
		secs = append(secs, s...)
	}
	return JoinListing(header, secs)
}

// FunctionSections returns the names of the sections that function fn of
// m needs: its own and, transitively, those of the functions it calls that
// m holds. A callee m lacks is returned in missing (by name), so that a
// caller can ask nvdisasm for it too.
func FunctionSections(m *Module, fn string) (secs []string, missing []string) {
	f := m.Func(fn)
	if f == nil {
		return nil, []string{fn}
	}
	seenSec := map[string]bool{}
	seenFn := map[string]bool{}
	work := []*Function{f}
	for len(work) > 0 {
		g := work[len(work)-1]
		work = work[:len(work)-1]
		if !seenSec[g.Section] {
			seenSec[g.Section] = true
			secs = append(secs, g.Section)
			// Every function of the section: code of the section may call
			// out of any of them (subroutines placed after a kernel).
			for _, h := range m.bySection[g.Section] {
				seenFn[h.Name] = true
				for i := range h.Insts {
					c := h.Insts[i].Callee
					if c == "" || seenFn[c] {
						continue
					}
					seenFn[c] = true
					if cf := m.Func(c); cf != nil {
						work = append(work, cf)
					} else {
						missing = append(missing, c)
					}
				}
			}
		}
	}
	sort.Strings(secs)
	sort.Strings(missing)
	return secs, missing
}

// FunctionListing returns the listing of function fn (with the sections of
// its callees) cut from text, the listing m was parsed from; ok is false
// when m does not hold fn.
func FunctionListing(text []byte, m *Module, fn string) (listing []byte, ok bool) {
	want, _ := FunctionSections(m, fn)
	if len(want) == 0 {
		return nil, false
	}
	need := map[string]bool{}
	for _, s := range want {
		need[s] = true
	}
	header, secs := SplitListing(text)
	var keep []ListingSection
	for _, s := range secs {
		if need[s.Name] {
			keep = append(keep, s)
		}
	}
	return JoinListing(header, keep), true
}
