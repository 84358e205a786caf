package profile

import (
	"fmt"
	"strings"
)

// Validate checks the profile's internal consistency. Errors name the table,
// the key and the field that is wrong.
func (p *Profile) Validate() error {
	root, ok := p.Nodes[RootID]
	if !ok || root.Frame.Kind != KindRoot {
		return fmt.Errorf("profile: Nodes[root]: missing or not of kind root")
	}
	for id, n := range p.Nodes {
		if n.ID != id {
			return fmt.Errorf("profile: Nodes[%#x].ID: %#x", uint64(id), uint64(n.ID))
		}
		if id == RootID {
			continue
		}
		if n.Frame.Kind == KindRoot || n.Frame.Kind >= numKinds {
			return fmt.Errorf("profile: Nodes[%#x].Frame.Kind: %v below the root", uint64(id), n.Frame.Kind)
		}
		par, ok := p.Nodes[n.Parent]
		if !ok {
			return fmt.Errorf("profile: Nodes[%#x].Parent: %#x not in the profile", uint64(id), uint64(n.Parent))
		}
		if err := kindUnder(n.Frame.Kind, par.Frame.Kind); err != "" {
			return fmt.Errorf("profile: Nodes[%#x].Frame.Kind: %s", uint64(id), err)
		}
		if ChildID(n.Parent, n.Frame) != id {
			return fmt.Errorf("profile: Nodes[%#x]: id does not match its parent and frame", uint64(id))
		}
	}
	// The remaining checks read disjoint tables; a large profile (a
	// reducer's partial) runs them in parallel.
	checks := []func() error{p.validateCycles, p.validateTables, p.validateTemporal, p.validateKeys}
	errs := make([]error, len(checks))
	fs := make([]func(), len(checks))
	for i, c := range checks {
		fs[i] = func() { errs[i] = c() }
	}
	if len(p.Nodes)+len(p.Temporal) < parMin {
		for _, f := range fs {
			f()
		}
	} else {
		runAll(fs)
	}
	return firstErr(errs...)
}

func (p *Profile) validateCycles() error {
	// Parents were checked to exist and ids to be hashes of (parent, frame),
	// so a cycle would need a hash fixed point; still, bound the walk.
	for id := range p.Nodes {
		cur, steps := id, 0
		for cur != RootID {
			cur = p.Nodes[cur].Parent
			if steps++; steps > len(p.Nodes) {
				return fmt.Errorf("profile: Nodes[%#x].Parent: cycle", uint64(id))
			}
		}
	}
	return nil
}

// Checkers of table keys; where names the entry, formatted only for an
// error (formatting every key was most of a large profile's validation).
func (p *Profile) pcErr(where func() string, field string, pc PC) error {
	if _, ok := p.Funcs[pc.Func]; !ok {
		return fmt.Errorf("profile: %s%s: function %#x not in Funcs", where(), field, uint64(pc.Func))
	}
	return nil
}

func (p *Profile) ctxErr(where func() string, id NodeID) error {
	n, ok := p.Nodes[id]
	if !ok {
		return fmt.Errorf("profile: %s.Context: %#x not in Nodes", where(), uint64(id))
	}
	if n.Frame.Kind != KindKernel {
		return fmt.Errorf("profile: %s.Context: %#x is a %v node, not a kernel", where(), uint64(id), n.Frame.Kind)
	}
	return nil
}

func (p *Profile) objErr(where func() string, id ObjectID) error {
	if _, ok := p.Objects[id]; !ok {
		return fmt.Errorf("profile: %s.Object: %#x not in Objects", where(), uint64(id))
	}
	return nil
}

func (p *Profile) validateTables() error {
	for id, f := range p.Funcs {
		if f.ID != id || FuncIDOf(f.Module, f.Name) != id {
			return fmt.Errorf("profile: Funcs[%#x]: id does not match module and name", uint64(id))
		}
		if _, ok := p.Modules[f.Module]; !ok {
			return fmt.Errorf("profile: Funcs[%#x].Module: %v not in Modules", uint64(id), f.Module)
		}
	}
	for h, m := range p.Modules {
		if m.Hash != h {
			return fmt.Errorf("profile: Modules[%v].Hash: %v", h, m.Hash)
		}
	}
	for id, o := range p.Objects {
		if o.ID != id {
			return fmt.Errorf("profile: Objects[%#x].ID: %#x", uint64(id), uint64(o.ID))
		}
		if _, ok := p.Nodes[o.Context]; !ok {
			return fmt.Errorf("profile: Objects[%#x].Context: %#x not in Nodes", uint64(id), uint64(o.Context))
		}
	}
	for r := range p.Items {
		if _, ok := p.Ranks[r]; !ok {
			return fmt.Errorf("profile: Items[%d]: rank has no entry in Ranks", r)
		}
	}
	for r, ri := range p.Ranks {
		if ri.Rank != r {
			return fmt.Errorf("profile: Ranks[%d].Rank: %d", r, ri.Rank)
		}
	}
	for _, m := range []struct {
		name string
		t    map[int32]map[NodeID]Values
	}{{"Open", p.Open}, {"PerRank", p.PerRank}} {
		for r, vals := range m.t {
			if _, ok := p.Items[r]; !ok {
				return fmt.Errorf("profile: %s[%d]: rank has no items", m.name, r)
			}
			for id := range vals {
				if _, ok := p.Nodes[id]; !ok {
					return fmt.Errorf("profile: %s[%d][%#x]: node not in Nodes", m.name, r, uint64(id))
				}
			}
		}
	}
	for id := range p.Summaries {
		if _, ok := p.Nodes[id]; !ok {
			return fmt.Errorf("profile: Summaries[%#x]: node not in Nodes", uint64(id))
		}
	}
	return nil
}

func (p *Profile) validateTemporal() error {
	for k := range p.Temporal {
		w := func() string { return fmt.Sprintf("Temporal[%#x %v]", uint64(k.Context), k.Access) }
		if err := firstErr(p.ctxErr(w, k.Context), p.pcErr(w, ".Old", k.Old), p.pcErr(w, ".New", k.New)); err != nil {
			return err
		}
	}
	return nil
}

func (p *Profile) validateKeys() error {
	for k := range p.Spatial {
		w := func() string { return fmt.Sprintf("Spatial[%#x %v]", uint64(k.Context), k.Access) }
		if err := firstErr(p.ctxErr(w, k.Context), p.objErr(w, k.Object), p.pcErr(w, ".PC", k.PC)); err != nil {
			return err
		}
	}
	for k := range p.PCs {
		w := func() string { return fmt.Sprintf("PCs[%#x %v]", uint64(k.Context), k.Access) }
		if err := firstErr(p.ctxErr(w, k.Context), p.pcErr(w, ".PC", k.PC)); err != nil {
			return err
		}
	}
	for k := range p.ObjStats {
		w := func() string { return fmt.Sprintf("ObjStats[%#x %v]", uint64(k.Context), k.Access) }
		if err := firstErr(p.ctxErr(w, k.Context), p.objErr(w, k.Object)); err != nil {
			return err
		}
	}
	return nil
}

// kindUnder says what is wrong with a node of kind k under a parent of kind
// par, or "" if the nesting is allowed.
func kindUnder(k, par NodeKind) string {
	ok := false
	switch k {
	case KindHostFrame:
		ok = par == KindRoot || par == KindHostFrame
	case KindKernel:
		ok = par == KindRoot || par == KindHostFrame
	case KindGPUFunction, KindInlined, KindLoop, KindLine:
		ok = par >= KindKernel && par != KindInstruction && par != KindLine
	case KindInstruction:
		ok = par >= KindKernel && par != KindInstruction
	}
	if ok {
		return ""
	}
	return fmt.Sprintf("a %v node cannot be a child of a %v node", k, par)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// FrameString is a short readable rendering of a frame.
func (f Frame) String() string {
	var b strings.Builder
	b.WriteString(f.Kind.String())
	if f.Function != "" {
		b.WriteString(" " + f.Function)
	}
	if f.File != "" {
		fmt.Fprintf(&b, " %s:%d", f.File, f.Line)
	} else if f.Line != 0 {
		fmt.Fprintf(&b, " :%d", f.Line)
	}
	if f.Module != "" {
		b.WriteString(" [" + f.Module + "]")
	}
	if f.Offset != 0 || f.Kind == KindInstruction {
		fmt.Fprintf(&b, " +%#x", f.Offset)
	}
	return b.String()
}
