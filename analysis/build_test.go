package analysis

import (
	"math"
	"testing"

	"gpuprof/profile"
)

// kb builds one kernel context of a test profile.
type kb struct {
	p    *profile.Profile
	mod  profile.ModuleHash
	k    *profile.Node
	body *profile.Node
	fid  profile.FuncID
}

const testMod = profile.ModuleHash(0xabc0)

func newKernel(p *profile.Profile, host, name string) *kb {
	p.AddModule(profile.Module{Hash: testMod, Name: "app.cubin", SM: 90})
	h := p.Path(profile.Frame{Kind: profile.KindHostFrame, Module: "/app", Function: host, File: "main.cu", Line: 10})
	k := p.Child(h.ID, profile.Frame{Kind: profile.KindKernel, Module: testMod.String(), Function: name})
	body := p.Child(k.ID, profile.Frame{Kind: profile.KindGPUFunction, Module: testMod.String(), Function: name})
	return &kb{p: p, mod: testMod, k: k, body: body, fid: p.AddFunc(testMod, name)}
}

func (b *kb) loop(parent profile.NodeID, line uint32, off uint64) profile.NodeID {
	return b.p.Child(parent, profile.Frame{Kind: profile.KindLoop, File: "k.cu", Line: line, Offset: off}).ID
}

// callee adds a device function called from the body.
func (b *kb) callee(name string) (profile.NodeID, profile.FuncID) {
	n := b.p.Child(b.body.ID, profile.Frame{Kind: profile.KindGPUFunction, Module: testMod.String(), Function: name})
	return n.ID, b.p.AddFunc(testMod, name)
}

// inst adds the instruction at off (line `line` of k.cu) under parent.
func (b *kb) inst(parent profile.NodeID, fid profile.FuncID, line uint32, off uint32) (profile.NodeID, profile.PC) {
	ln := b.p.Child(parent, profile.Frame{Kind: profile.KindLine, File: "k.cu", Line: line})
	in := b.p.Child(ln.ID, profile.Frame{Kind: profile.KindInstruction, Offset: uint64(off)})
	return in.ID, profile.PC{Func: fid, Offset: off}
}

func (b *kb) object(size uint64, line uint32, space uint8) profile.ObjectID {
	ctx := b.p.Path(profile.Frame{Kind: profile.KindHostFrame, Module: "/app", Function: "main", File: "main.cu", Line: line})
	id := profile.ObjectIDOf(ctx.ID, size)
	b.p.Objects[id] = &profile.DataObject{ID: id, Context: ctx.ID, Size: size, Count: 1, Space: space}
	return id
}

// access records n lane accesses of kind a at PC (node id), with values
// drawn by val(i), and the object statistics when obj != 0.
func (b *kb) access(id profile.NodeID, pc profile.PC, a profile.Access, obj profile.ObjectID, kind profile.ValueKind, bits uint8, n int, val func(i int) uint64) {
	m := profile.MemLoads
	if a == profile.Store {
		m = profile.MemStores
	}
	b.p.Add(id, m, uint64(n))
	st := b.p.PCStatOf(profile.PCKey{Context: b.k.ID, PC: pc, Access: a})
	st.Accesses += uint64(n)
	if st.Values == nil {
		st.Values = profile.NewValueSketch(kind, bits)
	}
	var os *profile.ObjectStat
	if obj != 0 {
		os = b.p.ObjStatOf(profile.ObjectKey{Context: b.k.ID, Object: obj, Access: a})
		os.Accesses += uint64(n)
		if os.Values == nil {
			os.Values = profile.NewValueSketch(kind, bits)
		}
	}
	seen := map[uint64]bool{}
	var red uint64
	for i := 0; i < n; i++ {
		v := val(i)
		st.Values.AddN(v, 1)
		if os != nil {
			os.Values.AddN(v, 1)
			if seen[v] {
				red++
			}
			seen[v] = true
		}
	}
	if obj != 0 && red > 0 {
		b.p.Spatial[profile.SpatialKey{Context: b.k.ID, Object: obj, PC: pc, Access: a}] += red
		rm := profile.RedSpatLoad
		if a == profile.Store {
			rm = profile.RedSpatStore
		}
		b.p.Add(id, rm, red)
	}
}

func f32(f float32) uint64 { return uint64(math.Float32bits(f)) }

// seal makes p a single sealed item of rank r.
func seal(t *testing.T, p *profile.Profile, r int32) *profile.Profile {
	t.Helper()
	p.Rank(r).Batches = 0
	if err := p.AsItem(r, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// ranksMerged builds one sealed profile per rank 0..n-1 with build and
// merges them.
func ranksMerged(t *testing.T, n int32, build func(p *profile.Profile, r int32)) *profile.Profile {
	t.Helper()
	var merged *profile.Profile
	for r := int32(0); r < n; r++ {
		p := profile.New("j")
		build(p, r)
		seal(t, p, r)
		if merged == nil {
			merged = p
		} else if err := merged.Merge(p); err != nil {
			t.Fatal(err)
		}
	}
	return merged
}

func find(as []Advice, kind string) *Advice {
	for i := range as {
		if as[i].Kind == kind {
			return &as[i]
		}
	}
	return nil
}
