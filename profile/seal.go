package profile

// addRank returns ss with rank r's values vs folded in, as
// ss.MergeAll(FromValues(r, vs)) does. Sealing a rank folds its value at
// every node, and a rank's metrics at a node are usually those already
// summarised there: merged in place then, with no allocation.
func (ss Summaries) addRank(r int32, vs Values) Summaries {
	if len(ss) != len(vs) {
		return ss.MergeAll(FromValues(r, vs))
	}
	for i, v := range vs {
		if ss[i].ID != v.ID || v.V == 0 {
			return ss.MergeAll(FromValues(r, vs))
		}
	}
	for i, v := range vs {
		ss[i].S = ss[i].S.Merge(One(r, v.V))
	}
	return ss
}
