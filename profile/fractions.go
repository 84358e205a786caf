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

// Fractions are a profile's whole-program redundancy fractions (GVProf
// eq. 1-2 summed over every PC): redundant accesses over measured accesses
// of the same direction. A direction with no measured access has no
// fraction (its Has flag is false).
type Fractions struct {
	Loads, Stores uint64
	// Temporal and spatial, loads and stores, in FractionNames' order.
	Value [4]float64
	Has   [4]bool
}

// FractionNames name Fractions.Value's entries.
var FractionNames = [4]string{"temporal load", "temporal store", "spatial load", "spatial store"}

// RedundancyFractions returns the profile's whole-program fractions.
func (p *Profile) RedundancyFractions() Fractions {
	t := p.Totals(MemLoads, MemStores, RedTempLoad, RedTempStore, RedSpatLoad, RedSpatStore)
	f := Fractions{Loads: t[0], Stores: t[1]}
	for i := range f.Value {
		d := t[i%2]
		if d > 0 {
			f.Value[i] = float64(t[2+i]) / float64(d)
			f.Has[i] = true
		}
	}
	return f
}
