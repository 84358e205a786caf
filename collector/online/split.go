package online

import "sort"

// sampleSplit divides the samples of a function that carry no launch
// (continuous PC sampling; hybrid mode's counts, read once at the end)
// over the calling contexts that launched it. Continuous collection lets
// launches run as the application issues them, so CUPTI cannot say which
// launch a sample came from, only which function. A function launched
// from one context, the common case, needs no split. Otherwise each
// context's share is the threads it launched since the previous split:
// the samples read come from the launches that ran since the last read,
// and a kernel's sample count grows with its threads as its time does.
// With no launch since, the previous shares hold (the rest of the same
// launches' samples); before any, the shares of all launches.
type sampleSplit struct {
	window map[uint32]uint64 // context -> threads launched since the shares were set
	total  map[uint32]uint64 // context -> threads launched in all
	ctxs   []uint32          // the current shares' contexts, in order
	share  []float64
	owed   []float64 // samples due to each context and not given yet (fractions carried)
	give   []uint64
}

func newSampleSplit() *sampleSplit {
	return &sampleSplit{window: map[uint32]uint64{}, total: map[uint32]uint64{}}
}

// launched counts a launch of threads threads from context ctx.
func (s *sampleSplit) launched(ctx uint32, threads uint64) {
	if threads == 0 {
		threads = 1 // a launch whose shape is unknown still ran
	}
	s.window[ctx] += threads
	s.total[ctx] += threads
}

// several says whether the function has been launched from more than one
// context: only then is there anything to split.
func (s *sampleSplit) several() bool { return len(s.total) > 1 }

// begin sets the shares for the samples of one read: from the launches
// since the previous shares were set, else the previous shares, else all
// launches.
func (s *sampleSplit) begin() {
	from := s.window
	if len(from) == 0 {
		if len(s.ctxs) > 0 {
			return
		}
		from = s.total
	}
	s.ctxs = s.ctxs[:0]
	var sum uint64
	for c, n := range from {
		s.ctxs = append(s.ctxs, c)
		sum += n
	}
	sort.Slice(s.ctxs, func(i, j int) bool { return s.ctxs[i] < s.ctxs[j] })
	s.share, s.owed, s.give = s.share[:0], s.owed[:0], s.give[:0]
	for _, c := range s.ctxs {
		s.share = append(s.share, float64(from[c])/float64(sum))
		s.owed = append(s.owed, 0)
		s.give = append(s.give, 0)
	}
	clear(s.window)
}

// take divides n samples by the shares and calls add for each context
// given any. Fractions are carried from one call to the next (error
// diffusion), so that many counts of one or two samples still add up to
// each context's share: over any run of calls a context's total is
// within one sample of its share of their sum.
func (s *sampleSplit) take(n uint64, add func(ctx uint32, k uint64)) {
	if n == 0 || len(s.ctxs) == 0 {
		return
	}
	left := n
	for i := range s.ctxs {
		s.give[i] = 0
		s.owed[i] += float64(n) * s.share[i]
		if s.owed[i] >= 1 {
			k := min(uint64(s.owed[i]), left)
			s.owed[i] -= float64(k)
			s.give[i] = k
			left -= k
		}
	}
	for ; left > 0; left-- { // what the whole parts left: one each to those owed most
		j := 0
		for i := range s.owed {
			if s.owed[i] > s.owed[j] {
				j = i
			}
		}
		s.owed[j]--
		s.give[j]++
	}
	for i, c := range s.ctxs {
		if s.give[i] > 0 {
			add(c, s.give[i])
		}
	}
}

// merge adds o's launches, their contexts renamed by alias where it has
// them (a function reported before its module, orphans.go).
func (s *sampleSplit) merge(o *sampleSplit, alias map[uint32]uint32) {
	name := func(c uint32) uint32 {
		if t, ok := alias[c]; ok {
			return t
		}
		return c
	}
	for c, n := range o.window {
		s.window[name(c)] += n
	}
	for c, n := range o.total {
		s.total[name(c)] += n
	}
}
