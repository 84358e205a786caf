package html

import (
	"fmt"
	"sort"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/internal/view"
	"gpuprof/viewer-export/text"
)

// One finding, or one data object, is one item however many calling
// contexts reach it: a kernel launched from several call sites (sibling
// contexts) gives the same advice at each, and a data object is read and
// written by several kernel contexts.

// adviceGroups groups sorted advice that repeats at sibling contexts: the
// same kind of finding at the same place (its main hotspot's label, which
// leaves out the host calling context). Groups keep the order of their
// best member; members keep theirs.
func adviceGroups(p *profile.Profile, sorted []analysis.Advice) [][]analysis.Advice {
	var groups [][]analysis.Advice
	at := map[string]int{}
	for _, a := range sorted {
		k := a.Category + "\x00" + a.Kind
		if len(a.Hotspots) > 0 {
			k += "\x00" + text.WhereLabel(p, a.Hotspots[0])
		} else {
			k += "\x00" + a.Hint
		}
		if i, ok := at[k]; ok {
			groups[i] = append(groups[i], a)
			continue
		}
		at[k] = len(groups)
		groups = append(groups, []analysis.Advice{a})
	}
	return groups
}

// siblingPlaces are a group's lines: per member, its main place, the part
// of its host calling context the members do not share, and its numbers.
func siblingPlaces(p *profile.Profile, g []analysis.Advice) []string {
	callers := make([][]string, len(g))
	for i, a := range g {
		if len(a.Hotspots) > 0 {
			if c := view.CallerPath(p, p.KernelOf(a.Hotspots[0].Context)); c != "" {
				callers[i] = strings.Split(c, " > ")
			}
		}
	}
	common := commonPrefix(callers)
	var out []string
	for i, a := range g {
		place := "(no place)"
		if len(a.Hotspots) > 0 {
			place = text.WhereLabel(p, a.Hotspots[0])
		}
		from := callers[i]
		if len(from) > common {
			from = from[common:]
		}
		nums := "importance " + pct(a.Importance)
		if a.Speedup > 0 {
			nums = fmt.Sprintf("est. speedup %.2fx, %s", a.Speedup, nums)
		}
		line := place
		if len(from) > 0 {
			line += " — called from " + strings.Join(from, " > ")
		}
		out = append(out, line+" ("+nums+")")
	}
	return out
}

// commonPrefix is the number of leading frames every non-empty path shares
// (at most one less than the shortest, so each keeps a frame of its own).
func commonPrefix(paths [][]string) int {
	var ref []string
	n := -1
	for _, p := range paths {
		if len(p) == 0 {
			continue
		}
		if ref == nil {
			ref = p
		}
		if n < 0 || len(p)-1 < n {
			n = len(p) - 1
		}
	}
	for i := 0; i < n; i++ {
		for _, p := range paths {
			if len(p) > 0 && p[i] != ref[i] {
				return i
			}
		}
	}
	return max(n, 0)
}

// unionRanks merges the members' ranks (nil: all ranks, if any member
// applies to all).
func unionRanks(g []analysis.Advice) []int32 {
	seen := map[int32]bool{}
	var out []int32
	for _, a := range g {
		if len(a.Ranks) == 0 {
			return nil
		}
		for _, r := range a.Ranks {
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// objectGroup is one data object with the kernel contexts and access kinds
// that use it.
type objectGroup struct {
	first     view.Object // the use with the most accesses (its histogram is shown)
	uses      []view.Object
	redundant uint64
	accesses  uint64
}

// objectGroups groups the (context, object, access) entries by object,
// ordered by redundant accesses, at most top groups.
func objectGroups(p *profile.Profile, top int) []objectGroup {
	at := map[profile.ObjectID]int{}
	var gs []objectGroup
	for _, o := range view.TopObjects(p, 0) {
		i, ok := at[o.Object]
		if !ok {
			i = len(gs)
			at[o.Object] = i
			gs = append(gs, objectGroup{first: o})
		}
		g := &gs[i]
		g.uses = append(g.uses, o)
		g.redundant += o.Redundant
		g.accesses += o.Accesses
		if o.Accesses > g.first.Accesses {
			g.first = o
		}
	}
	sort.SliceStable(gs, func(i, j int) bool {
		if gs[i].redundant != gs[j].redundant {
			return gs[i].redundant > gs[j].redundant
		}
		return gs[i].accesses > gs[j].accesses
	})
	if top > 0 && len(gs) > top {
		gs = gs[:top]
	}
	return gs
}

// objectRowOf renders a group: totals over its uses, and a line per use
// (kernel, the calling context that tells sibling contexts apart, access,
// redundancy) when there are several.
func objectRowOf(p *profile.Profile, n int, g objectGroup) objectRow {
	kernels, accesses := []string{}, []string{}
	seenK, seenA := map[string]bool{}, map[string]bool{}
	callers := make([][]string, len(g.uses))
	for i, u := range g.uses {
		if !seenK[u.Kernel] {
			seenK[u.Kernel] = true
			kernels = append(kernels, u.Kernel)
		}
		if a := u.Access.String(); !seenA[a] {
			seenA[a] = true
			accesses = append(accesses, a)
		}
		if c := view.CallerPath(p, u.Context); c != "" {
			callers[i] = strings.Split(c, " > ")
		}
	}
	row := objectRow{N: n, Kernel: strings.Join(kernels, ", "), Object: g.first.Label, Access: strings.Join(accesses, ", "),
		Redundant: view.Count(float64(g.redundant)), Accesses: view.Count(float64(g.accesses)), Fraction: "n/a"}
	if g.accesses > 0 {
		row.Fraction = pct(float64(g.redundant) / float64(g.accesses))
	}
	if len(g.uses) > 1 {
		common := commonPrefix(callers)
		for i, u := range g.uses {
			from := ""
			if len(callers[i]) > common {
				from = " (from " + strings.Join(callers[i][common:], " > ") + ")"
			}
			f := "n/a"
			if u.Accesses > 0 {
				f = pct(u.Fraction)
			}
			row.Uses = append(row.Uses, fmt.Sprintf("%s%s %s: %s of %s redundant (%s)", u.Kernel, from, u.Access, view.Count(float64(u.Redundant)), view.Count(float64(u.Accesses)), f))
		}
	}
	row.Hist, row.Distinct, row.Range = histogram(g.first.Values)
	return row
}
