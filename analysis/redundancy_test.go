package analysis

import (
	"math"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/symname"
)

func TestSpatialClasses(t *testing.T) {
	cases := []struct {
		name  string
		kind  profile.ValueKind
		bits  uint8
		val   func(i int) uint64
		want  string
		lines uint32
	}{
		{"zero fill", profile.ValFloat, 32, func(int) uint64 { return f32(0) }, KindConstant, 21},
		{"mostly one", profile.ValFloat, 32, func(i int) uint64 {
			if i%10 < 7 {
				return f32(1)
			}
			return f32(float32(i))
		}, KindConditional, 22},
		{"small ints", profile.ValInt, 32, func(i int) uint64 { return uint64(i % 100) }, KindNarrowType, 23},
		{"few floats", profile.ValFloat, 32, func(i int) uint64 { return f32(float32(i%40) * 0.37) }, KindCompression, 24},
		{"close floats", profile.ValFloat, 32, func(i int) uint64 { return f32(320 + float32(i%997)*0.01) }, KindApproximate, 25},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := profile.New("j")
			b := newKernel(p, "main", "_Z4fillPfi")
			obj := b.object(1<<20, 50, 0)
			id, pc := b.inst(b.body.ID, b.fid, c.lines, 0x80)
			b.access(id, pc, profile.Store, obj, c.kind, c.bits, 4000, c.val)
			// another, unremarkable access so the share is not 100%
			id2, pc2 := b.inst(b.body.ID, b.fid, 30, 0x100)
			b.access(id2, pc2, profile.Load, 0, profile.ValInt, 32, 1000, func(i int) uint64 { return uint64(i) })
			seal(t, p, 0)
			as := Redundancy(NewIndex(p), DefaultRedundancy, nil)
			a := find(as, c.want)
			if a == nil {
				t.Fatalf("no %q insight in %+v", c.want, as)
			}
			h := a.Hotspots[0]
			if h.File != "k.cu" || h.Line != c.lines || h.Object == nil || *h.Object != obj || !strings.Contains(h.Alloc, "main.cu:50") {
				t.Fatalf("hotspot %+v", h)
			}
			if symname.Short(h.Kernel) != "fill" || a.Importance != 1 { // every store of the kernel goes to obj
				t.Fatalf("kernel %q importance %v", h.Kernel, a.Importance)
			}
			if a.Ranks != nil {
				t.Fatalf("ranks %v, want all", a.Ranks)
			}
			for _, o := range as {
				if o.Kind != c.want && o.Hotspots[0].Line == c.lines {
					t.Fatalf("second insight %q at the same line", o.Kind)
				}
			}
		})
	}
}

func TestSpatialBelowThresholds(t *testing.T) {
	p := profile.New("j")
	b := newKernel(p, "main", "k")
	obj := b.object(4096, 50, 0)
	id, pc := b.inst(b.body.ID, b.fid, 21, 0x80)
	// Random-looking values: no class applies.
	b.access(id, pc, profile.Load, obj, profile.ValFloat, 32, 5000, func(i int) uint64 { return f32(float32(i*7919%100003) - 50000) })
	// A constant object with too few accesses.
	obj2 := b.object(64, 51, 0)
	id2, pc2 := b.inst(b.body.ID, b.fid, 22, 0x90)
	b.access(id2, pc2, profile.Load, obj2, profile.ValInt, 32, 10, func(int) uint64 { return 3 })
	seal(t, p, 0)
	if as := Redundancy(NewIndex(p), DefaultRedundancy, nil); len(as) != 0 {
		t.Fatalf("insights on unremarkable values: %+v", as)
	}
}

func TestSpatialImportanceIsShare(t *testing.T) {
	p := profile.New("j")
	b := newKernel(p, "main", "k")
	obj := b.object(4096, 50, 0)
	id, pc := b.inst(b.body.ID, b.fid, 21, 0x80)
	b.access(id, pc, profile.Load, obj, profile.ValInt, 32, 300, func(int) uint64 { return 7 })
	id2, pc2 := b.inst(b.body.ID, b.fid, 22, 0x90)
	b.access(id2, pc2, profile.Load, 0, profile.ValInt, 32, 900, func(i int) uint64 { return uint64(i) })
	seal(t, p, 0)
	a := find(Redundancy(NewIndex(p), DefaultRedundancy, nil), KindConstant)
	if a == nil || a.Importance != 0.25 {
		t.Fatalf("importance: %+v", a)
	}
	if !strings.Contains(a.Evidence, "99.7%") { // eq. 2: 299 of 300 accesses
		t.Fatalf("evidence %q lacks the eq. 2 ratio", a.Evidence)
	}
}

func TestTemporalLoopAndInlining(t *testing.T) {
	p := profile.New("j")
	b := newKernel(p, "main", "_Z6reloadPKfPfii")
	loop := b.loop(b.body.ID, 8, 0x100)
	inner, pcIn := b.inst(loop, b.fid, 8, 0x140)
	b.access(inner, pcIn, profile.Load, 0, profile.ValFloat, 32, 1000, func(int) uint64 { return f32(2) })
	p.Temporal[profile.TemporalKey{Context: b.k.ID, Old: pcIn, New: pcIn, Access: profile.Load}] = 900
	p.Add(inner, profile.RedTempLoad, 900)
	// Callee saving to local memory at entry and restoring at exit.
	fn, cfid := b.callee("_Z6helperPKfi")
	local := b.object(0, 0, 3)
	st, pcSt := b.inst(fn, cfid, 3, 0x10)
	ld, pcLd := b.inst(fn, cfid, 3, 0x90)
	b.access(st, pcSt, profile.Store, local, profile.ValInt, 32, 200, func(i int) uint64 { return uint64(i % 2) })
	b.access(ld, pcLd, profile.Load, local, profile.ValInt, 32, 200, func(i int) uint64 { return uint64(i % 2) })
	p.Temporal[profile.TemporalKey{Context: b.k.ID, Old: pcLd, New: pcLd, Access: profile.Load}] = 150
	// Outside any loop and not in a callee: no Table II class.
	out, pcOut := b.inst(b.body.ID, b.fid, 12, 0x300)
	b.access(out, pcOut, profile.Load, 0, profile.ValFloat, 32, 1000, func(i int) uint64 { return f32(float32(i)) })
	p.Temporal[profile.TemporalKey{Context: b.k.ID, Old: pcOut, New: pcOut, Access: profile.Load}] = 800
	seal(t, p, 0)
	as := Redundancy(NewIndex(p), DefaultRedundancy, nil)
	sr := find(as, KindScalarRepl)
	if sr == nil {
		t.Fatalf("no scalar replacement: %+v", as)
	}
	h := sr.Hotspots[0]
	if h.Line != 8 || h.Loop != "k.cu:8" || h.Pair == nil || h.Pair.Line != 8 || h.Amount != 900 {
		t.Fatalf("scalar replacement hotspot %+v", h)
	}
	if want := 900.0 / 2200; math.Abs(sr.Importance-want) > 1e-12 { // loads 1000+200+1000; the 200 stores do not count
		t.Fatalf("importance %v, want %v", sr.Importance, want)
	}
	in := find(as, KindInlining)
	if in == nil || symname.Short(in.Hotspots[0].Function) != "helper" {
		t.Fatalf("no inlining insight on helper: %+v", as)
	}
	for _, a := range as {
		if a.Hotspots[0].Line == 12 {
			t.Fatalf("insight outside a loop: %+v", a)
		}
	}
}

func TestRedundancyRanks(t *testing.T) {
	// The kernel runs on ranks 1 and 3 of 4; the insight names them.
	merged := ranksMerged(t, 4, func(p *profile.Profile, r int32) {
		b := newKernel(p, "main", "other")
		id, _ := b.inst(b.body.ID, b.fid, 5, 0)
		p.Add(id, profile.InstSamples, 1)
		p.Add(b.k.ID, profile.GPUTime, 100)
		if r == 1 || r == 3 {
			c := newKernel(p, "step", "_Z4fillPfi")
			p.Add(c.k.ID, profile.GPUTime, 100)
			obj := c.object(1<<20, 50, 0)
			id, pc := c.inst(c.body.ID, c.fid, 21, 0x80)
			c.access(id, pc, profile.Store, obj, profile.ValFloat, 32, 1000, func(int) uint64 { return f32(0) })
		}
	})
	a := find(Redundancy(NewIndex(merged), DefaultRedundancy, nil), KindConstant)
	if a == nil || len(a.Ranks) != 2 || a.Ranks[0] != 1 || a.Ranks[1] != 3 {
		t.Fatalf("ranks: %+v", a)
	}
	if !strings.Contains(a.Evidence, "2/4 ranks") {
		t.Fatalf("evidence %q", a.Evidence)
	}
}
