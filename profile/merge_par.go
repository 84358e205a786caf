package profile

import "fmt"

// MergeAll merges parts into p as successive p.Merge(parts[i]) calls
// would, with the same result byte for byte, and returns each part's error
// (nil where it merged or held nothing new; a part with an error leaves p
// as it was). A reducer node merges its children's partials so: the item
// bookkeeping runs part by part, then every table is merged on a goroutine
// of its own, walking the parts in order (the order matters only for value
// sketches, which then see the same sequence of merges).
func (p *Profile) MergeAll(parts []*Profile) []error {
	errs := make([]error, len(parts))
	var take []*Profile
	entries := 0
	for i, o := range parts {
		if o == nil {
			continue
		}
		if err := p.admit(o); err != nil {
			errs[i] = err
			continue
		}
		if p.holdsAll(o) {
			continue
		}
		if p.Job == "" {
			p.Job = o.Job
		}
		p.Synthetic = p.Synthetic || o.Synthetic
		for r, ob := range o.Items {
			if pb := p.Items[r]; pb != nil {
				pb.Or(ob)
			} else {
				p.Items[r] = ob.Clone()
			}
		}
		// Provenance keeps the first non-empty strings: merged part by
		// part, in order, as Merge does.
		for r, ri := range o.Ranks {
			p.Rank(r).merge(ri)
		}
		take = append(take, o)
		entries += len(o.Nodes) + len(o.Temporal) + len(o.PCs)
	}
	if len(take) == 0 {
		return errs
	}
	tables := []func(){
		func() {
			for _, o := range take {
				for id, on := range o.Nodes {
					pn := p.Nodes[id]
					if pn == nil {
						pn = &Node{ID: on.ID, Parent: on.Parent, Frame: on.Frame}
						p.Nodes[id] = pn
					}
					pn.Metrics = pn.Metrics.AddAll(on.Metrics)
				}
			}
		},
		func() {
			for _, o := range take {
				for h, m := range o.Modules {
					if _, ok := p.Modules[h]; !ok {
						mm := *m
						p.Modules[h] = &mm
					}
				}
				for id, f := range o.Funcs {
					if _, ok := p.Funcs[id]; !ok {
						ff := *f
						p.Funcs[id] = &ff
					}
				}
				for id, ob := range o.Objects {
					if pb, ok := p.Objects[id]; ok {
						pb.Count += ob.Count
					} else {
						c := *ob
						p.Objects[id] = &c
					}
				}
				for k, v := range o.Spatial {
					p.Spatial[k] += v
				}
			}
		},
		func() {
			for _, o := range take {
				for k, v := range o.Temporal {
					p.Temporal[k] += v
				}
			}
		},
		func() {
			for _, o := range take {
				for k, s := range o.PCs {
					ps := p.PCStatOf(k)
					ps.Accesses += s.Accesses
					ps.Values = mergeSketch(ps.Values, s.Values)
				}
			}
		},
		func() {
			for _, o := range take {
				for k, s := range o.ObjStats {
					ps := p.ObjStatOf(k)
					ps.Accesses += s.Accesses
					ps.Values = mergeSketch(ps.Values, s.Values)
				}
			}
		},
		func() {
			for _, o := range take {
				for id, ss := range o.Summaries {
					p.Summaries[id] = p.Summaries[id].MergeAll(ss)
				}
			}
		},
		func() {
			for _, o := range take {
				for r, vals := range o.Open {
					addValues(p.Open, r, vals)
				}
			}
		},
		func() {
			for _, o := range take {
				for r, vals := range o.PerRank {
					addValues(p.PerRank, r, vals)
				}
			}
		},
	}
	if entries < parMin {
		for _, f := range tables {
			f()
		}
	} else {
		runAll(tables)
	}
	// Sealing after every part or once at the end is the same: a rank
	// sealed by one part has all its items, so no later part merged holds
	// any of its values.
	for _, o := range take {
		for r := range o.Items {
			p.sealIfComplete(r)
		}
	}
	return errs
}

// admit returns the error Merge would give for o (another job, or a
// partial overlap of items), or nil.
func (p *Profile) admit(o *Profile) error {
	if p.Job != "" && o.Job != "" && p.Job != o.Job {
		return fmt.Errorf("profile: merge: job %q into job %q", o.Job, p.Job)
	}
	if p.holdsAll(o) {
		return nil
	}
	for r, ob := range o.Items {
		if pb := p.Items[r]; pb != nil && pb.AndCardinality(ob) != 0 {
			return &OverlapError{Rank: r, Shared: pb.AndCardinality(ob)}
		}
	}
	return nil
}

// holdsAll reports whether p already holds every item of o (merging o
// then changes nothing).
func (p *Profile) holdsAll(o *Profile) bool {
	for r, ob := range o.Items {
		if ob.IsEmpty() {
			continue
		}
		pb := p.Items[r]
		if pb == nil || pb.AndCardinality(ob) != ob.GetCardinality() {
			return false
		}
	}
	return true
}
