package html

import (
	"fmt"
	"sort"
	"strings"

	"gpuprof/profile"
	"gpuprof/viewer-export/internal/view"
	"gpuprof/viewer-export/text"
)

// A data object is one item however many kernel contexts read and write
// it (advice that repeats at sibling contexts is grouped by
// text.AdviceGroups).

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
		common := text.CommonPrefix(callers)
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
