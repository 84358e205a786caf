package online

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/symbolize"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// reference computes GVProf's definitions III.1-III.4 the plain way: one
// pass over the records in stream order, one map from (launch, thread,
// address, kind) to the last value, one set of values per (launch, object,
// kind). It shares nothing with the analyzer but the interpretation of the
// input (module hash, function ranges, access kinds, host frames).
type reference struct {
	temporal map[profile.TemporalKey]uint64
	spatial  map[profile.SpatialKey]uint64
	pcs      map[profile.PCKey]uint64
	objs     map[profile.ObjectKey]uint64
	// vals counts every value per instruction (for the dominant value).
	vals map[profile.PCKey]map[uint64]uint64
}

type refFunc struct {
	name     string
	hash     profile.ModuleHash
	pc, size uint64
	st       Structure
}

type refObj struct {
	start, end uint64
	id         profile.ObjectID
}

type refLaunch struct {
	ctx  profile.NodeID
	fn   *refFunc
	objs []refObj
}

type refThread struct {
	launch uint64
	block  uint32
	thread uint32
}

// refLast is a thread's last access of a kind to an address.
type refLast struct {
	addr uint64
	kind profile.Access
}

type refVal struct {
	v  uint64
	pc profile.PC
}

type refSeen struct {
	launch uint64
	obj    profile.ObjectID
	kind   profile.Access
}

func runReference(t *testing.T, stream []byte, structures StructureSource) *reference {
	ref := &reference{temporal: map[profile.TemporalKey]uint64{}, spatial: map[profile.SpatialKey]uint64{},
		pcs: map[profile.PCKey]uint64{}, objs: map[profile.ObjectKey]uint64{}, vals: map[profile.PCKey]map[uint64]uint64{}}
	host := symbolize.New()
	mods := map[uint64]profile.ModuleHash{}
	cubins := map[uint64][]byte{}
	byContent := map[uint64]int{}
	modFuncs := map[uint64][]string{}
	funcs := map[uint32]*refFunc{}
	var all []*refFunc
	launches := map[uint64]*refLaunch{}
	var live []refObj
	last := map[refThread]map[refLast]refVal{}
	seen := map[refSeen]map[uint64]bool{}
	var sm uint16
	d := rawstream.NewDecoder(bytes.NewReader(stream))
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *rawstream.Hello:
			sm = f.SM
		case *rawstream.HostModule:
			host.AddModule(f)
		case *rawstream.Module:
			if f.HasBytes {
				h := profile.ModuleHash(xxh(f.Bytes))
				mods[f.ModuleID], cubins[f.ModuleID] = h, f.Bytes
				byContent[f.ContentKey]++
			} else {
				for id, b := range cubins {
					if xxh(b) == uint64(mods[id]) && fnv(b) == f.ContentKey {
						mods[f.ModuleID], cubins[f.ModuleID] = mods[id], b
					}
				}
			}
		case *rawstream.Function:
			rf := &refFunc{name: f.Name, hash: mods[f.ModuleID], pc: f.PC, size: uint64(f.Size)}
			funcs[f.FunctionID] = rf
			all = append(all, rf)
			modFuncs[f.ModuleID] = append(modFuncs[f.ModuleID], f.Name)
			if structures != nil {
				rf.st, _ = StructureOf(structures, ModuleRef{Hash: rf.hash, Cubin: cubins[f.ModuleID], SM: sm, Functions: modFuncs[f.ModuleID]}, f.Name)
			}
		case *rawstream.Alloc:
			fr := host.Frames(f.Host)
			id := profile.ObjectIDOf(pathID(fr), f.Size)
			var keep []refObj
			for _, o := range live {
				if o.end <= f.Address || o.start >= f.Address+f.Size {
					keep = append(keep, o)
				}
			}
			live = append(keep, refObj{f.Address, f.Address + f.Size, id})
		case *rawstream.Free:
			for i, o := range live {
				if o.start == f.Address {
					live = append(live[:i:i], live[i+1:]...)
					break
				}
			}
		case *rawstream.Launch:
			fn := funcs[f.FunctionID]
			fr := append(host.Frames(f.Host), profile.Frame{Kind: profile.KindKernel, Module: fn.hash.String(), Function: fn.name})
			launches[f.LaunchID] = &refLaunch{ctx: pathID(fr), fn: fn, objs: append([]refObj(nil), live...)}
		case *rawstream.Access:
			l := launches[f.LaunchID]
			it := f.Records()
			for it.Next() {
				r := it.Record()
				ref.record(l, f.LaunchID, r, all, last, seen)
			}
		}
	}
	return ref
}

func (ref *reference) record(l *refLaunch, launch uint64, r *rawstream.Record, all []*refFunc,
	last map[refThread]map[refLast]refVal, seen map[refSeen]map[uint64]bool) {
	if r.Flags&rawstream.FlagBlockExit != 0 {
		for lane := 0; lane < 32; lane++ {
			if r.Active&(1<<lane) == 0 {
				continue
			}
			delete(last, refThread{launch, r.Block, uint32(r.Warp)*32 + uint32(lane)})
		}
		return
	}
	if r.Size == 0 || r.Flags&(rawstream.FlagRead|rawstream.FlagWrite) == 0 {
		return
	}
	kind := profile.Load // reads, and atomics (which carry the value they read)
	if r.Flags&rawstream.FlagWrite != 0 && r.Flags&rawstream.FlagAtomic == 0 {
		kind = profile.Store
	}
	// The function holding the PC, and the PC as nvdisasm numbers it.
	fn := l.fn
	for _, g := range all {
		if g.size > 0 && r.PC >= g.pc && r.PC < g.pc+g.size {
			fn = g
		}
	}
	off := r.PC - fn.pc
	pc := profile.PC{Func: profile.FuncIDOf(fn.hash, fn.name), Offset: uint32(off)}
	ak := fallbackKind(r.Size)
	if fn.st != nil {
		if pl, ok := fn.st.Place(fn.name, off); ok {
			pc = profile.PC{Func: profile.FuncIDOf(fn.hash, pl.Function), Offset: pl.Offset}
		}
		if k, ok := fn.st.AccessKind(fn.name, off); ok && k.UnitBits > 0 && int(r.Size)%int(k.UnitBits/8) == 0 {
			ak = k
		}
	}
	ub := int(ak.UnitBits) / 8
	lane := -1
	for e := 0; e < r.NumLanes(); e++ {
		lane++
		for r.Active&(1<<lane) == 0 {
			lane++
		}
		addr, val := r.Lane(e)
		for u := 0; u*ub < int(r.Size); u++ {
			var b [8]byte
			copy(b[:], val[u*ub:(u+1)*ub])
			v := binary.LittleEndian.Uint64(b[:])
			a := addr + uint64(u*ub)
			pk := profile.PCKey{Context: l.ctx, PC: pc, Access: kind}
			ref.pcs[pk]++
			if ref.vals[pk] == nil {
				ref.vals[pk] = map[uint64]uint64{}
			}
			ref.vals[pk][v]++
			// III.1 / III.2
			th := refThread{launch, r.Block, uint32(r.Warp)*32 + uint32(lane)}
			if last[th] == nil {
				last[th] = map[refLast]refVal{}
			}
			k := refLast{a, kind}
			if prev, ok := last[th][k]; ok && prev.v == v {
				ref.temporal[profile.TemporalKey{Context: l.ctx, Old: prev.pc, New: pc, Access: kind}]++
			}
			last[th][k] = refVal{v, pc}
			// III.3 / III.4
			var obj profile.ObjectID
			found := false
			switch r.Space {
			case rawstream.SpaceShared, rawstream.SpaceLocal:
				obj, found = profile.SpaceObjectID(l.ctx, uint8(r.Space)), true
			case rawstream.SpaceGlobal:
				for _, o := range l.objs {
					if a-uint64(u*ub) >= o.start && a-uint64(u*ub) < o.end {
						obj, found = o.id, true
					}
				}
			}
			if !found {
				continue
			}
			ref.objs[profile.ObjectKey{Context: l.ctx, Object: obj, Access: kind}]++
			sk := refSeen{launch, obj, kind}
			if seen[sk] == nil {
				seen[sk] = map[uint64]bool{}
			}
			if seen[sk][v] {
				ref.spatial[profile.SpatialKey{Context: l.ctx, Object: obj, PC: pc, Access: kind}]++
			}
			seen[sk][v] = true
		}
	}
}

func fnv(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// analyse runs the analyzer over a stream with the given worker count,
// flushing every flushEvery frames, and merges the items.
func analyse(t testing.TB, stream []byte, workers, flushEvery int, structures StructureSource) *profile.Profile {
	p, _ := analyseBusy(t, stream, workers, flushEvery, structures)
	return p
}

// analyseBusy is analyse, with the analyzer's time accounts.
func analyseBusy(t testing.TB, stream []byte, workers, flushEvery int, structures StructureSource) (*profile.Profile, Busy) {
	// Exact reuse histograms: the references compute every distance.
	return analyseWith(t, stream, Options{Workers: workers, Structures: structures, ReuseSampling: 1}, flushEvery)
}

// analyseWith is analyseBusy with the analyzer's options (job and rank
// are set here).
func analyseWith(t testing.TB, stream []byte, o Options, flushEvery int) (*profile.Profile, Busy) {
	p, _, busy := analyseItems(t, stream, o, flushEvery, 0)
	return p, busy
}

// analyseRecords is analyseWith with an item every records access
// records, as the collector makes them (put off while Holding).
func analyseRecords(t testing.TB, stream []byte, o Options, records uint64) (*profile.Profile, Busy) {
	p, _, busy := analyseItemsBy(t, stream, o, func(a *Analyzer, _ int) bool { return a.Pending() >= records && !a.Holding() })
	return p, busy
}

// analyseItems analyses a stream as the collector batches it: an item
// after every flushEvery frames (0: one item), put off while the analyzer
// holds a kernel reported before its module (Holding); at frame forceAt
// (if > 0) an item goes out even so, as when the collector's bound is
// reached. It returns the merged profile, every item valid, and the data
// items.
func analyseItems(t testing.TB, stream []byte, o Options, flushEvery, forceAt int) (*profile.Profile, []*profile.Profile, Busy) {
	return analyseItemsBy(t, stream, o, func(a *Analyzer, n int) bool {
		return n == forceAt || flushEvery > 0 && n%flushEvery == 0 && !a.Holding()
	})
}

// analyseItemsBy is analyseItems with an item whenever flushNow says so
// after a frame.
func analyseItemsBy(t testing.TB, stream []byte, o Options, flushNow func(a *Analyzer, frames int) bool) (*profile.Profile, []*profile.Profile, Busy) {
	o.Job, o.Rank = "j", 3
	a := New(o)
	defer a.Close()
	merged := profile.New("j")
	var items []*profile.Profile
	flush := func() {
		seq := uint32(len(items))
		p, err := a.Flush(seq)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("item %d: %v", seq, err)
		}
		if err := merged.Merge(p); err != nil {
			t.Fatal(err)
		}
		items = append(items, p)
	}
	d := rawstream.NewDecoder(bytes.NewReader(stream))
	n := 0
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Add(f, d.Offset()); err != nil {
			t.Fatal(err)
		}
		if n++; flushNow(a, n) {
			flush()
		}
	}
	a.Final()
	flush()
	if k, first := a.Anomalies(); k != 0 {
		t.Fatalf("%d anomalies, first: %s", k, first)
	}
	done, err := a.Done(uint32(len(items)), a.ExitCode(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := merged.Merge(done); err != nil {
		t.Fatal(err)
	}
	if err := merged.Validate(); err != nil {
		t.Fatal(err)
	}
	return merged, items, a.Busy()
}

func compare(t *testing.T, name string, ref *reference, p *profile.Profile) {
	t.Helper()
	diff := func(table string, want, got map[string]uint64) {
		n := 0
		for k, w := range want {
			if got[k] != w {
				if n++; n <= 5 {
					t.Errorf("%s: %s %s: analyzer %d, reference %d", name, table, k, got[k], w)
				}
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok && g != 0 {
				if n++; n <= 5 {
					t.Errorf("%s: %s %s: analyzer %d, reference none", name, table, k, g)
				}
			}
		}
		if n > 5 {
			t.Errorf("%s: %s: %d differences", name, table, n)
		}
	}
	str := func(k any) string { return fmt.Sprintf("%+v", k) }
	tw, tg := map[string]uint64{}, map[string]uint64{}
	for k, v := range ref.temporal {
		tw[str(k)] = v
	}
	for k, v := range p.Temporal {
		tg[str(k)] = v
	}
	diff("temporal", tw, tg)
	sw, sg := map[string]uint64{}, map[string]uint64{}
	for k, v := range ref.spatial {
		sw[str(k)] = v
	}
	for k, v := range p.Spatial {
		sg[str(k)] = v
	}
	diff("spatial", sw, sg)
	pw, pg := map[string]uint64{}, map[string]uint64{}
	for k, v := range ref.pcs {
		pw[str(k)] = v
	}
	for k, v := range p.PCs {
		pg[str(k)] = v.Accesses
	}
	diff("pc accesses", pw, pg)
	ow, og := map[string]uint64{}, map[string]uint64{}
	for k, v := range ref.objs {
		ow[str(k)] = v
	}
	for k, v := range p.ObjStats {
		og[str(k)] = v.Accesses
	}
	diff("object accesses", ow, og)
	// The node metrics agree with the tables.
	var redT, redS, tabT, tabS uint64
	for _, n := range p.Nodes {
		redT += n.Metrics.Get(profile.RedTempLoad) + n.Metrics.Get(profile.RedTempStore)
		redS += n.Metrics.Get(profile.RedSpatLoad) + n.Metrics.Get(profile.RedSpatStore)
	}
	for _, v := range p.Temporal {
		tabT += v
	}
	for _, v := range p.Spatial {
		tabS += v
	}
	if redT != tabT || redS != tabS {
		t.Errorf("%s: node metrics temporal %d spatial %d, tables %d %d", name, redT, redS, tabT, tabS)
	}
}

// compareRedundant compares and insists that the stream exercised both
// kinds of redundancy (generated streams are built to).
func compareRedundant(t *testing.T, name string, ref *reference, p *profile.Profile) {
	t.Helper()
	compare(t, name, ref, p)
	if len(ref.temporal) == 0 || len(ref.spatial) == 0 {
		t.Errorf("%s: the stream exercises no redundancy (temporal %d, spatial %d pairs)", name, len(ref.temporal), len(ref.spatial))
	}
}

func synthStream(t testing.TB, o synth.Options, rank int) []byte {
	var buf bytes.Buffer
	if _, err := synth.WriteRank(&buf, rank, o); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// runs: worker counts and flush intervals (in frames) each stream is
// analysed with; every run must equal the reference exactly.
var runs = []struct{ workers, flush int }{{1, 0}, {3, 7}, {8, 3}}

func TestMatchesReferenceOnSynthStreams(t *testing.T) {
	probe := &SASS{NVDisasm: "-", Files: []string{"../../testdata/sass/probe/k.sass.txt"}}
	for _, c := range []struct {
		name string
		o    synth.Options
		st   StructureSource
	}{
		{"default", synth.Options{Seed: 1, BlockSampling: 4, FrameRecords: 100, Iterations: 2}, nil},
		{"sass", synth.Options{Seed: 2, BlockSampling: 4, FrameRecords: 77, Iterations: 3}, probe},
		{"single", synth.Options{Seed: 3, Pattern: synth.PatternSingle, BlockSampling: 5, Iterations: 2}, probe},
		{"few", synth.Options{Seed: 4, Pattern: synth.PatternFew, BlockSampling: 3, KernelSampling: 1, Iterations: 2}, nil},
		{"random", synth.Options{Seed: 5, Pattern: synth.PatternRandom, BlockSampling: 6, Iterations: 2}, probe},
	} {
		stream := synthStream(t, c.o, 1)
		ref := runReference(t, stream, c.st)
		for _, r := range runs {
			p := analyse(t, stream, r.workers, r.flush, c.st)
			compareRedundant(t, fmt.Sprintf("%s/workers=%d/flush=%d", c.name, r.workers, r.flush), ref, p)
		}
	}
}

// randomStream writes a stream built to stress the definitions: few
// addresses and values (many collisions), several launches interleaved,
// blocks exiting and their ids reused by later launches, allocations freed
// and reallocated between launches, every lane size, shared and local
// accesses and addresses outside every allocation.
func randomStream(t testing.TB, seed uint64) []byte {
	return randomStreamRepeating(t, seed, false)
}

// randomStreamRepeating is randomStream; with repeat, half the records
// are a warp's earlier record again (the same instruction, lanes,
// addresses and values, as a loop that reloads what it loaded), a third
// of those from another instruction or with other values, and half the
// new records have affine addresses (and half of those one value), which
// the compact encoding writes in its short forms.
func randomStreamRepeating(t testing.TB, seed uint64, repeat bool) []byte {
	rng := rand.New(rand.NewPCG(seed, 99))
	var buf bytes.Buffer
	w := rawstream.NewWriter(&buf)
	put := func(f rawstream.Frame) {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	put(&rawstream.Hello{Version: 1, Mode: rawstream.ModeRedundancy, BlockSampling: 1, KernelSampling: 1, Rank: 0})
	cubin := []byte("\x7fELF-not-really-a-cubin")
	put(&rawstream.Module{ModuleID: 1, ContentKey: fnv(cubin), Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin})
	put(&rawstream.Module{ModuleID: 2, ContentKey: fnv(cubin), Size: uint32(len(cubin))})
	put(&rawstream.Function{FunctionID: 1, ModuleID: 1, PC: 0x10000, Size: 0x400, Name: "_Z2k1v"})
	put(&rawstream.Function{FunctionID: 2, ModuleID: 2, PC: 0x20000, Size: 0x400, Name: "_Z2k2v"})
	put(&rawstream.Function{FunctionID: 3, ModuleID: 1, PC: 0x10400, Size: 0x100, Name: "_Z6helperv"})
	type alloc struct{ addr, size uint64 }
	var live []alloc
	next := uint64(0x100000)
	allocate := func() {
		sz := uint64(64 << rng.IntN(4))
		a := alloc{next, sz}
		next += sz + 64
		live = append(live, a)
		put(&rawstream.Alloc{AllocID: uint64(len(live)), Address: a.addr, Size: sz, Memory: rawstream.AllocDevice, Host: []uint64{uint64(0x400000 + 16*rng.IntN(3))}})
	}
	for i := 0; i < 4; i++ {
		allocate()
	}
	sizes := []uint8{1, 2, 4, 8, 16}
	values := func(size uint8) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.IntN(2)) // few values
		}
		return b
	}
	for round := 0; round < 6; round++ {
		if round > 0 && rng.IntN(2) == 0 {
			k := rng.IntN(len(live))
			put(&rawstream.Free{Address: live[k].addr})
			live = append(live[:k], live[k+1:]...)
			allocate()
		}
		ids := []uint64{uint64(round*2 + 1), uint64(round*2 + 2)}
		for j, id := range ids {
			put(&rawstream.Launch{LaunchID: id, FunctionID: uint32(1 + j), Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{64, 1, 1},
				Instrumented: true, Host: []uint64{uint64(0x500000 + 32*j), 0x600000}})
		}
		type lane struct {
			addr uint64
			val  []byte
		}
		type recSpec struct {
			pc     uint64
			block  uint32
			warp   uint16
			space  rawstream.Space
			flags  rawstream.Flags
			active uint32
			size   uint8
			lanes  []lane
		}
		hist := make([][]recSpec, len(ids))
		for frame := 0; frame < 6; frame++ {
			for j, id := range ids {
				acc := &rawstream.Access{LaunchID: id}
				base := uint64(0x10000 + 0x10000*j)
				for rec := 0; rec < 20; rec++ {
					if repeat && len(hist[j]) > 0 && rng.IntN(2) == 0 {
						sp := hist[j][rng.IntN(len(hist[j]))]
						switch rng.IntN(6) {
						case 0:
							sp.pc = base + uint64(16*rng.IntN(8))
						case 1:
							sp.lanes = append([]lane(nil), sp.lanes...)
							for k := range sp.lanes {
								sp.lanes[k].val = values(sp.size)
							}
						}
						acc.AppendRecord(sp.pc, sp.block, sp.warp, sp.space, sp.flags, sp.active, sp.size)
						for _, ln := range sp.lanes {
							acc.AppendLane(ln.addr, ln.val)
						}
						continue
					}
					block := uint32(rng.IntN(4))
					warp := uint16(rng.IntN(2))
					if rng.IntN(15) == 0 {
						acc.AppendRecord(base+0x3f0, block, warp, rawstream.SpaceNone, rawstream.FlagBlockExit, uint32(rng.Uint64()), 0)
						continue
					}
					size := sizes[rng.IntN(len(sizes))]
					space := rawstream.Space(1 + rng.IntN(3))
					if rng.IntN(3) > 0 {
						space = rawstream.SpaceGlobal
					}
					flags := rawstream.FlagRead
					if rng.IntN(2) == 0 {
						flags = rawstream.FlagWrite
					}
					pc := base + uint64(16*rng.IntN(8))
					if j == 0 && rng.IntN(6) == 0 {
						pc = 0x10400 + uint64(16*rng.IntN(4)) // in the helper
					}
					active := uint32(rng.Uint64()) | 1
					acc.AppendRecord(pc, block, warp, space, flags, active, size)
					sp := recSpec{pc: pc, block: block, warp: warp, space: space, flags: flags, active: active, size: size}
					// With repeat, half the records have affine
					// addresses (one address, or one unit a lane), half
					// of those one value, as a loop's loads mostly do:
					// compacted, they take the wire form's keys.
					affine, step, uniform := repeat && rng.IntN(2) == 0, uint64(size)*uint64(rng.IntN(2)), rng.IntN(2) == 0
					a0 := live[rng.IntN(len(live))].addr
					v0 := values(size)
					for l := 0; l < 32; l++ {
						if active&(1<<l) == 0 {
							continue
						}
						if affine {
							addr, v := a0+step*uint64(l), values(size)
							if uniform {
								v = v0
							}
							acc.AppendLane(addr, v)
							sp.lanes = append(sp.lanes, lane{addr, v})
							continue
						}
						var addr uint64
						if space == rawstream.SpaceGlobal {
							a := live[rng.IntN(len(live))]
							addr = a.addr + uint64(rng.IntN(int(a.size)/16))*16
							if rng.IntN(20) == 0 {
								addr = 0x50 // outside every allocation
							}
						} else {
							addr = uint64(rng.IntN(8) * 16)
						}
						v := values(size)
						acc.AppendLane(addr, v)
						sp.lanes = append(sp.lanes, lane{addr, v})
					}
					hist[j] = append(hist[j], sp)
				}
				put(acc)
			}
		}
		for _, id := range ids {
			put(&rawstream.KernelEnd{LaunchID: id, StartNS: 1, EndNS: 100, BlocksTotal: 4, BlocksSampled: 4})
		}
	}
	put(&rawstream.End{})
	return buf.Bytes()
}

func TestMatchesReferenceOnRandomStreams(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		for _, repeat := range []bool{false, true} {
			stream := randomStreamRepeating(t, seed, repeat)
			ref := runReference(t, stream, nil)
			compact, err := rawstream.CompactStream(stream)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				compareRedundant(t, fmt.Sprintf("seed=%d/repeat=%v/workers=%d/flush=%d", seed, repeat, r.workers, r.flush), ref, analyse(t, stream, r.workers, r.flush, nil))
				compareRedundant(t, fmt.Sprintf("seed=%d/repeat=%v/compact/workers=%d/flush=%d", seed, repeat, r.workers, r.flush), ref, analyse(t, compact, r.workers, r.flush, nil))
			}
		}
	}
}

func xxh(b []byte) uint64 { return xxhashSum(b) }

// Barriers brought forward by full candidate tables (candLimit, lowered
// here so that they come every few records) leave the counts exact: on
// random streams and on the fully traced H100 capture with the most new
// values, for 1 and 3 workers, without items to hide them. (Whether a
// barrier comes early depends on how far the workers are behind the
// dispatcher, which reads their counts after their frames: the random
// streams' many small frames bring some on any machine.)
func TestEarlyBarriersMatchReference(t *testing.T) {
	old := candLimit
	candLimit = 64
	defer func() { candLimit = old }()
	type input struct {
		name   string
		stream []byte
		st     StructureSource
	}
	var ins []input
	for seed := uint64(1); seed <= 2; seed++ {
		ins = append(ins, input{fmt.Sprintf("random seed=%d", seed), randomStream(t, seed), nil})
	}
	capture, err := os.ReadFile("../../testdata/captures/stall_memory.redundancy.p1.gpr")
	if err != nil {
		t.Fatal(err)
	}
	ins = append(ins, input{"stall_memory capture", capture, &SASS{NVDisasm: "-", Files: []string{"../../testdata/sass/stall_memory"}}})
	early := 0
	for _, in := range ins {
		ref := runReference(t, in.stream, in.st)
		for _, w := range []int{1, 3} {
			p, b := analyseBusy(t, in.stream, w, 0, in.st)
			compare(t, fmt.Sprintf("%s/workers=%d", in.name, w), ref, p)
			early += b.EarlyBarriers
			t.Logf("%s/workers=%d: %d barriers, %d early", in.name, w, b.Barriers, b.EarlyBarriers)
		}
	}
	if early == 0 {
		t.Error("no barrier came early: the test did not exercise them")
	}
}
