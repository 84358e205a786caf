package analysis

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gpuprof/profile"
)

// GPU is one GPU of the job and the ranks that used it.
type GPU struct {
	Host   string
	Device string // CUDA device ordinal on its host ("" if unknown)
	UUID   string
	Name   string
	Ranks  []int32 // ascending
	// Sampled are the ranks of a PC-sampling pass whose samples of this
	// GPU the profile holds; TimesOnly the ranks that gave kernel times
	// only because another process sampled the GPU (CUPTI serves one
	// process per GPU; docs/inject.md "One process per GPU"). Ranks of
	// other modes, and of profiles older than format version 4, are in
	// neither.
	Sampled, TimesOnly []int32
}

// ShortUUID shortens a GPU UUID to its first group ("GPU-3f2a1b9c", or
// "MIG-…" for a MIG instance), which tells a job's GPUs apart as
// nvidia-smi -L shows them.
func ShortUUID(u string) string {
	pre := ""
	for _, p := range []string{"GPU-", "MIG-"} {
		if strings.HasPrefix(u, p) {
			pre, u = p, u[len(p):]
		}
	}
	if i := strings.IndexByte(u, '-'); i > 0 {
		u = u[:i]
	}
	return pre + u
}

// GPUs are the job's ranks grouped by the GPU each used.
type GPUs struct {
	List []GPU         // hosts in order of their lowest rank, then by device ordinal
	Of   map[int32]int // rank -> index in List
	// Known: every rank's GPU is identified (by UUID, or by host and
	// device ordinal).
	Known bool
	Hosts int
}

// Shared reports whether some GPU served more than one rank.
func (gs GPUs) Shared() bool {
	for _, g := range gs.List {
		if len(g.Ranks) > 1 {
			return true
		}
	}
	return false
}

// Grouped reports whether the grouping says more than the rank list: the
// GPUs are known and there are several, or ranks share one.
func (gs GPUs) Grouped() bool { return gs.Known && (len(gs.List) > 1 || gs.Shared()) }

// Label names GPU i: "GPU 1" (its ordinal, or its short UUID when the
// ordinal is unknown), with its host when the job ran on several.
func (gs GPUs) Label(i int) string {
	g := gs.List[i]
	s := "GPU " + g.Device
	switch {
	case g.Device == "" && g.UUID != "":
		s = ShortUUID(g.UUID)
	case g.Device == "":
		s = "GPU ?"
	}
	if gs.Hosts > 1 {
		s += " on " + g.Host
	}
	return s
}

// Describe is GPU i's label with its short UUID and name.
func (gs GPUs) Describe(i int) string {
	g := gs.List[i]
	var parts []string
	if g.Device != "" && g.UUID != "" {
		parts = append(parts, ShortUUID(g.UUID))
	}
	if g.Name != "" {
		parts = append(parts, g.Name)
	}
	if len(parts) == 0 {
		return gs.Label(i)
	}
	return gs.Label(i) + " (" + strings.Join(parts, ", ") + ")"
}

// PCSampled reads a rank's PC-sampling state (RankInfo.PCSampling, a
// '+'-joined set after merging passes): sampled when some pass sampled
// its GPU, timesOnly when its PC-sampling pass gave kernel times only.
func PCSampled(ri *profile.RankInfo) (sampled, timesOnly bool) {
	if ri == nil {
		return false, false
	}
	for _, s := range strings.Split(ri.PCSampling, "+") {
		switch {
		case s == "sampled":
			sampled = true
		case strings.HasPrefix(s, "kernel times only"):
			timesOnly = true
		}
	}
	return sampled, timesOnly && !sampled
}

// GPUsOf groups p's ranks by GPU: by UUID where a rank knows it (UUIDs
// are unique across hosts), else by host and device ordinal. A rank with
// neither gets a GPU of its own host marked unknown (Known is then false).
func GPUsOf(p *profile.Profile) GPUs {
	gs := GPUs{Of: map[int32]int{}, Known: true}
	at := map[string]int{}
	firstRank := map[string]int32{}
	ranks := p.SortedRanks()
	for _, r := range ranks {
		ri := p.Ranks[r]
		key := "uuid\x00" + ri.GPUUUID
		switch {
		case ri.GPUUUID != "":
		case ri.Device != "":
			key = "dev\x00" + ri.Host + "\x00" + ri.Device
		default:
			key = "none\x00" + ri.Host
			gs.Known = false
		}
		i, ok := at[key]
		if !ok {
			i = len(gs.List)
			at[key] = i
			gs.List = append(gs.List, GPU{Host: ri.Host, Device: ri.Device, UUID: ri.GPUUUID, Name: ri.GPU})
		}
		if _, ok := firstRank[ri.Host]; !ok {
			firstRank[ri.Host] = r
		}
		g := &gs.List[i]
		g.Ranks = append(g.Ranks, r)
		switch s, t := PCSampled(ri); {
		case s:
			g.Sampled = append(g.Sampled, r)
		case t:
			g.TimesOnly = append(g.TimesOnly, r)
		}
	}
	gs.Hosts = len(firstRank)
	ord := func(d string) int {
		if n, err := strconv.Atoi(d); err == nil {
			return n
		}
		return 1 << 30 // unknown or a set: after the numbered GPUs
	}
	sort.SliceStable(gs.List, func(i, j int) bool {
		a, b := gs.List[i], gs.List[j]
		if a.Host != b.Host {
			return firstRank[a.Host] < firstRank[b.Host]
		}
		if oa, ob := ord(a.Device), ord(b.Device); oa != ob {
			return oa < ob
		}
		if a.UUID != b.UUID {
			return a.UUID < b.UUID
		}
		return a.Ranks[0] < b.Ranks[0]
	})
	for i, g := range gs.List {
		for _, r := range g.Ranks {
			gs.Of[r] = i
		}
	}
	return gs
}

// SamplingNote says which ranks were PC-sampled on each GPU and which gave
// kernel times only, or "" when no rank gave kernel times only (every
// sampled rank had its GPU to itself, or no pass sampled).
func (gs GPUs) SamplingNote() string {
	var sampled []string
	var only []int32
	for i, g := range gs.List {
		for _, r := range g.Sampled {
			if len(sampled) == 8 {
				sampled = append(sampled, "… (one per GPU)")
			}
			if len(sampled) < 8 {
				sampled = append(sampled, fmt.Sprintf("%d (%s)", r, gs.Label(i)))
			}
		}
		only = append(only, g.TimesOnly...)
	}
	nOnly := len(only)
	if nOnly == 0 {
		return ""
	}
	s := "none"
	if len(sampled) > 0 {
		s = strings.Join(sampled, ", ")
	}
	return fmt.Sprintf("one process per GPU is PC-sampled: ranks %s sampled; %d other rank%s gave kernel times only, as the policy has it, not a failure (ranks %s)",
		s, nOnly, plural(nOnly), RankSet(only))
}

// RankSet writes ranks compactly, sorting a copy: runs of three or more
// with one stride as "0-7" (stride 1) or "0-62/2" (every second rank:
// ranks spread over two GPUs by local rank), the rest one by one.
func RankSet(rs []int32) string {
	rs = append([]int32(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		if i+1 < len(rs) {
			d := rs[i+1] - rs[i]
			for j+1 < len(rs) && rs[j+1]-rs[j] == d {
				j++
			}
			switch {
			case j-i >= 2 && d == 1:
				parts = append(parts, fmt.Sprintf("%d-%d", rs[i], rs[j]))
				i = j + 1
				continue
			case j-i >= 2:
				parts = append(parts, fmt.Sprintf("%d-%d/%d", rs[i], rs[j], d))
				i = j + 1
				continue
			case j-i == 1 && d == 1:
				parts = append(parts, fmt.Sprintf("%d,%d", rs[i], rs[j]))
				i = j + 1
				continue
			}
		}
		parts = append(parts, fmt.Sprint(rs[i]))
		i++
	}
	return strings.Join(parts, ",")
}

// samplesOf says on which ranks' PC samples advice about kernel context k
// rests: the ranks that ran k and whose GPU was sampled in them, and those
// that ran it with kernel times only. Both are nil when the profile holds
// no rank's sampling state.
func samplesOf(x *Index, gs GPUs, k profile.NodeID) (sampled, timesOnly []int32) {
	ran := x.KernelRanks(k)
	if ran == nil {
		ran = x.P.SortedRanks()
	}
	for _, r := range ran {
		switch s, t := PCSampled(x.P.Ranks[r]); {
		case s:
			sampled = append(sampled, r)
		case t:
			timesOnly = append(timesOnly, r)
		}
	}
	return sampled, timesOnly
}

// noteSampledRanks records on advice built from PC samples whose ranks'
// samples it rests on (Advice.SampledRanks) and, when ranks that ran the
// kernel gave kernel times only, says so in its evidence. Redundancy
// insights (access records) and imbalance (kernel times) rest on no
// samples.
func noteSampledRanks(x *Index, gs GPUs, a *Advice) {
	if a.Category == CatRedundancy || a.Category == CatImbalance || len(a.Hotspots) == 0 {
		return
	}
	k := x.P.KernelOf(a.Hotspots[0].Context)
	if k == profile.RootID || x.Inclusive(k).Get(profile.InstSamples) == 0 {
		return
	}
	sampled, only := samplesOf(x, gs, k)
	if len(sampled) == 0 {
		return
	}
	a.SampledRanks = sampled
	if len(only) == 0 {
		return
	}
	var on []string
	for _, r := range sampled {
		if i, ok := gs.Of[r]; ok && gs.Known {
			on = append(on, fmt.Sprintf("%d (%s)", r, gs.Label(i)))
		} else {
			on = append(on, strconv.Itoa(int(r)))
		}
	}
	a.Evidence += fmt.Sprintf("; rests on the PC samples of rank%s %s; rank%s %s ran the kernel with kernel times only (one process per GPU is sampled)",
		plural(len(sampled)), strings.Join(on, ", "), plural(len(only)), joinRanks(only))
}

func plural(n int) string {
	if n > 1 {
		return "s"
	}
	return ""
}

func joinRanks(rs []int32) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ", ")
}
