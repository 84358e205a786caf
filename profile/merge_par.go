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
		p.Interrupted = joinSet(p.Interrupted, o.Interrupted)
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
				p.mergeNodes(o)
			}
		},
		func() {
			for _, o := range take {
				p.mergeCode(o)
			}
		},
		func() {
			for _, o := range take {
				p.mergeTemporal(o)
			}
		},
		func() {
			for _, o := range take {
				p.mergePCStats(o)
			}
		},
		func() {
			for _, o := range take {
				p.mergeObjStats(o)
			}
		},
		func() {
			for _, o := range take {
				p.mergeSummaries(o)
			}
		},
		func() {
			for _, o := range take {
				p.mergeOpen(o)
			}
		},
		func() {
			for _, o := range take {
				p.mergePerRank(o)
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
