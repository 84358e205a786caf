package profile

// Totals sums each metric over every node (exclusive values, so nothing is
// counted twice).
func (p *Profile) Totals(ms ...MetricID) []uint64 {
	out := make([]uint64, len(ms))
	for _, n := range p.Nodes {
		for i, m := range ms {
			out[i] += n.Metrics.Get(m)
		}
	}
	return out
}

// Fractions are a profile's whole-program redundancy fractions: redundant
// accesses over measured accesses of the same direction. A direction with
// no measured access has no fraction (its Has flag is false).
//
// Temporal and spatial follow GVProf's definitions III.1-4 and eq. 1-2
// summed over every PC: a spatially redundant access repeats a value an
// earlier access of the same object and launch carried, so the spatial
// fraction is 1 - distinct/accesses per (object, launch, PC).
//
// Dominant is what GVProf's implementation reports as spatial redundancy
// (its analysis library counts, per data object and instruction, the
// accesses that carry the most frequent value): here per instruction and
// kernel context, from the instruction's value sketch, over the
// instructions that have one. The two answer different questions (how
// many accesses repeat some value, how many carry the one most common
// value) and behave differently under block sampling: dominant is a ratio
// of counts, which a sample of blocks estimates without bias when blocks
// are alike; the repeat fraction depends on how many distinct values were
// seen, which a sample underestimates (docs/overhead.md).
type Fractions struct {
	Loads, Stores uint64
	// In FractionNames' order.
	Value [6]float64
	Has   [6]bool
}

// FractionNames name Fractions.Value's entries.
var FractionNames = [6]string{"temporal load", "temporal store", "spatial load", "spatial store", "dominant load", "dominant store"}

// RedundancyFractions returns the profile's whole-program fractions.
func (p *Profile) RedundancyFractions() Fractions {
	t := p.Totals(MemLoads, MemStores, RedTempLoad, RedTempStore, RedSpatLoad, RedSpatStore)
	f := Fractions{Loads: t[0], Stores: t[1]}
	for i := 0; i < 4; i++ {
		if d := t[i%2]; d > 0 {
			f.Value[i] = float64(t[2+i]) / float64(d)
			f.Has[i] = true
		}
	}
	var dom, acc [2]uint64
	for k, st := range p.PCs {
		if st.Values == nil || st.Accesses == 0 || k.Access > Store {
			continue
		}
		_, c := st.Values.Dominant()
		dom[k.Access] += min(c, st.Accesses)
		acc[k.Access] += st.Accesses
	}
	for i := 0; i < 2; i++ {
		if acc[i] > 0 {
			f.Value[4+i] = float64(dom[i]) / float64(acc[i])
			f.Has[4+i] = true
		}
	}
	return f
}
