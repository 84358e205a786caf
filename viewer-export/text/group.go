package text

import (
	"fmt"
	"sort"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/internal/view"
)

// One finding is one item however many calling contexts reach it: a
// kernel launched from several call sites (sibling contexts) gives the
// same advice at each; the report and the browser view list it once, with
// its places.

// AdviceGroups groups sorted advice that repeats at sibling contexts: the
// same kind of finding, with the same hint, in the same GPU function, at
// different kernel contexts (the host calling context is what differs;
// the main hotspot may too, where each context's samples pick another
// instruction first). Advice without a place groups by its hint. Groups
// keep the order of their best member; members keep theirs.
func AdviceGroups(p *profile.Profile, sorted []analysis.Advice) [][]analysis.Advice {
	var groups [][]analysis.Advice
	at := map[string]int{}
	ctxs := map[int]map[profile.NodeID]bool{} // per group, its members' kernel contexts
	for _, a := range sorted {
		// A framework phase (autotuning) ranks apart from the program's own
		// work (SortAdvice), so its advice is a group of its own.
		k := a.Category + "\x00" + a.Kind + "\x00" + a.Phase + "\x00" + a.Hint
		ctx := profile.NodeID(0)
		if len(a.Hotspots) > 0 {
			ctx = p.KernelOf(a.Hotspots[0].Context)
			k += "\x00" + kernelFunction(p, a.Hotspots[0])
		}
		// Two findings of one context are two items, whatever they share.
		if i, ok := at[k]; ok && (ctx == 0 || !ctxs[i][ctx]) {
			groups[i] = append(groups[i], a)
			ctxs[i][ctx] = true
			continue
		}
		at[k] = len(groups)
		ctxs[len(groups)] = map[profile.NodeID]bool{ctx: true}
		groups = append(groups, []analysis.Advice{a})
	}
	return groups
}

// kernelFunction names the GPU function of an advice's place: its kernel
// (a device function's advice is its kernel's).
func kernelFunction(p *profile.Profile, w analysis.Where) string {
	if w.Kernel != "" {
		return w.Kernel
	}
	if n := p.Nodes[p.KernelOf(w.Context)]; n != nil {
		return n.Frame.Function
	}
	return ""
}

// siblings are a group's members' own parts: the main place, the part of
// the host calling context the members do not share, and the numbers.
type sibling struct{ place, from, nums string }

func siblings(p *profile.Profile, g []analysis.Advice) []sibling {
	callers := make([][]string, len(g))
	for i, a := range g {
		if len(a.Hotspots) > 0 {
			if c := view.CallerPath(p, p.KernelOf(a.Hotspots[0].Context)); c != "" {
				callers[i] = strings.Split(c, " > ")
			}
		}
	}
	common := CommonPrefix(callers)
	out := make([]sibling, len(g))
	for i, a := range g {
		out[i].place = "(no place)"
		if len(a.Hotspots) > 0 {
			out[i].place = WhereLabel(p, a.Hotspots[0])
		}
		if from := callers[i]; len(from) > common {
			out[i].from = strings.Join(from[common:], " > ")
		} else if len(from) > 0 {
			out[i].from = strings.Join(from, " > ")
		}
		out[i].nums = "importance " + pct(a.Importance)
		if a.Speedup > 0 {
			out[i].nums = fmt.Sprintf("est. speedup %.2fx, %s", a.Speedup, out[i].nums)
		}
	}
	return out
}

// SiblingPlaces are a group's lines: per member, its main place, the part
// of its host calling context the members do not share, and its numbers.
func SiblingPlaces(p *profile.Profile, g []analysis.Advice) []string {
	var out []string
	for _, s := range siblings(p, g) {
		line := s.place
		if s.from != "" {
			line += " — called from " + s.from
		}
		out = append(out, line+" ("+s.nums+")")
	}
	return out
}

// SiblingCallers are a group's lines in the text report, where the place
// follows once: per member, its caller and its numbers.
func SiblingCallers(p *profile.Profile, g []analysis.Advice) []string {
	var out []string
	for _, s := range siblings(p, g) {
		from := s.from
		if from == "" {
			from = "(no host calling context)"
		}
		out = append(out, "called from "+from+" ("+s.nums+")")
	}
	return out
}

// CommonPrefix is the number of leading frames every non-empty path shares
// (at most one less than the shortest, so each keeps a frame of its own).
func CommonPrefix(paths [][]string) int {
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

// UnionRanks merges the members' ranks (nil: all ranks, if any member
// applies to all).
func UnionRanks(g []analysis.Advice) []int32 {
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
