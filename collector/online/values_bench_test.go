package online

import "testing"

// BenchmarkValueCounters counts the values of store records as a loop
// writes them (a lane's value is its element's and the iteration's, so
// 32 distinct values a record out of a few hundred a counter) into the
// counters of 32 instructions, as a shard's many counters share the
// caches: ns per value.
func BenchmarkValueCounters(b *testing.B) {
	kind := AccessKind{Type: 0, UnitBits: 32}
	budget := shardValBudget
	cs := make([]valCounter, 32)
	for i := range cs {
		cs[i].budget = &budget
	}
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		c := &cs[i%len(cs)]
		base := uint64(i/len(cs)) % 200
		for l := uint64(0); l < 32; l++ {
			c.add(base+(uint64(i)*32+l)%100, kind)
		}
		n += 32
	}
	for i := range cs {
		cs[i].settle(kind)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/value")
}
