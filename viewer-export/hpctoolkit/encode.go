package hpctoolkit

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/internal/view"
)

// The database's binary files (meta.db, profile.db, cct.db) and the
// metrics YAML, written from a built tree (write.go); the layouts are in
// docs/hpctoolkit-format.md.

type wbuf struct{ b []byte }

func (w *wbuf) pos() uint64 { return uint64(len(w.b)) }
func (w *wbuf) align(n int) {
	for len(w.b)%n != 0 {
		w.b = append(w.b, 0)
	}
}
func (w *wbuf) pad(to uint64) {
	for w.pos() < to {
		w.b = append(w.b, 0)
	}
}
func (w *wbuf) u8(v uint8)   { w.b = append(w.b, v) }
func (w *wbuf) u16(v uint16) { w.b = binary.LittleEndian.AppendUint16(w.b, v) }
func (w *wbuf) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *wbuf) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *wbuf) f64(v float64) {
	w.u64(math.Float64bits(v))
}
func (w *wbuf) put64(at, v uint64) { binary.LittleEndian.PutUint64(w.b[at:], v) }
func (w *wbuf) str(s string) uint64 {
	at := w.pos()
	w.b = append(w.b, s...)
	w.b = append(w.b, 0)
	return at
}

// header starts a file: magic, format, version 4.0 and n section slots.
func header(format string, n int) *wbuf {
	w := &wbuf{}
	w.b = append(w.b, "HPCTOOLKIT"...)
	w.b = append(w.b, format...)
	w.u8(4)
	w.u8(0)
	w.b = append(w.b, make([]byte, 16*n)...)
	return w
}

// section runs fill at the next 8-aligned offset and records the section.
func (w *wbuf) section(i int, fill func(start uint64)) {
	w.align(8)
	start := w.pos()
	fill(start)
	w.put64(uint64(16+16*i), w.pos()-start)
	w.put64(uint64(24+16*i), start)
}

// strings collects strings placed later in the same section; patch writes
// them and fixes the pointers.
type strRefs struct {
	at  []uint64
	val []string
}

func (s *strRefs) ref(w *wbuf, v string) {
	s.at = append(s.at, w.pos())
	s.val = append(s.val, v)
	w.u64(0)
}

func (s *strRefs) patch(w *wbuf) {
	done := map[string]uint64{}
	for i, v := range s.val {
		p, ok := done[v]
		if !ok {
			p = w.str(v)
			done[v] = p
		}
		w.put64(s.at[i], p)
	}
}

func (b *builder) description() string {
	p := b.p
	var d strings.Builder
	fmt.Fprintf(&d, "# gpuprof profile of job %s\n\n", p.Job)
	if p.Synthetic {
		d.WriteString("**Synthetic data**: some of the merged items were generated, not measured.\n\n")
	}
	if p.Interrupted != "" {
		d.WriteString("**" + view.InterruptedNote(p.Interrupted) + "**\n\n")
	}
	fmt.Fprintf(&d, "%d items merged from %d ranks (%d sealed).\n\n", p.MergedItems(), len(p.Items), p.SealedRanks())
	if gs := b.gpus; gs.Grouped() {
		// host → GPU → ranks, as the profiles' identifier tuples nest them.
		fmt.Fprintf(&d, "Ranks by host and GPU: %s.\n\n| host | GPU | UUID | name | ranks | PC sampling |\n|---|---|---|---|---|---|\n", view.GPUSummary(gs))
		for _, g := range view.GPURows(gs) {
			fmt.Fprintf(&d, "| %s | %s | %s | %s | %s | %s |\n", g.Host, g.Device, g.UUID, g.Name, g.Ranks, g.Sampling)
		}
		if l := gs.SamplingNote(); l != "" {
			d.WriteString("\nPC sampling: " + l + ".\n")
		}
		d.WriteString("\n")
	}
	d.WriteString("| rank | host | GPU | device | PC sampling | mode | source | block P | kernel K | launches traced | dropped | incomplete |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range b.ranks {
		ri := p.Ranks[r]
		dev := ri.Device
		if ri.GPUUUID != "" {
			dev = strings.TrimPrefix(dev+" · "+analysis.ShortUUID(ri.GPUUUID), " · ")
		}
		fmt.Fprintf(&d, "| %d | %s | %s | %s | %s | %s | %s | %d | %d | %d/%d | %d | %s |\n", r, ri.Host, ri.GPU, dev, view.RankSampling(ri), ri.Mode, ri.Source,
			ri.BlockP, ri.KernelK, ri.LaunchesTraced, ri.Launches, ri.Dropped+ri.HostDropped, ri.Incomplete)
	}
	d.WriteString("\nPer-rank profiles hold host contexts and kernel launches only; GPU-internal contexts (functions, loops, lines, instructions) are in the summary profile.\n")
	return d.String()
}

// encodeMeta writes meta.db: one function per section below. Sections are
// written in file order except the context tree (section 3), which comes
// last because it points into the string, file, module and function
// tables.
func (b *builder) encodeMeta() []byte {
	w := header("meta", 8)
	w.section(0, func(uint64) { b.metaGeneral(w) })
	w.section(1, func(s uint64) { metaIDNames(w, s) })
	w.section(2, func(s uint64) { b.metaMetrics(w, s) })
	var t metaTables
	w.section(4, func(uint64) { t.strAt = b.metaStrings(w) })
	w.section(5, func(s uint64) { t.mods = nameTable(w, s, b.modules, t.strAt) })
	w.section(6, func(s uint64) { t.files = nameTable(w, s, b.files, t.strAt) })
	w.section(7, func(s uint64) { t.funcs = b.metaFuncs(w, s, &t) })
	w.section(3, func(s uint64) { b.metaContexts(w, s, &t) })
	w.b = append(w.b, "_meta.db"...)
	return w.b
}

// metaTables is where meta.db's shared tables were placed: the common
// strings by value, and the module, file and function arrays.
type metaTables struct {
	strAt              map[string]uint64
	mods, files, funcs uint64
}

// ptr is the address of entry i of the array at base (entries of size
// bytes), 0 for none (i < 0).
func ptr(base uint64, size uint64, i int) uint64 {
	if i < 0 {
		return 0
	}
	return base + size*uint64(i)
}

// metaGeneral is the General section: title and description.
func (b *builder) metaGeneral(w *wbuf) {
	var ss strRefs
	title := b.p.Job
	if title == "" {
		title = "gpuprof"
	}
	ss.ref(w, title)
	ss.ref(w, b.description())
	ss.patch(w)
}

// metaIDNames is the Identifier Names section.
func metaIDNames(w *wbuf, s uint64) {
	w.u64(s + 16)
	w.u8(uint8(len(idNames)))
	w.pad(s + 16)
	var ss strRefs
	for _, n := range idNames {
		ss.ref(w, n)
	}
	ss.patch(w)
}

// metaMetrics is the Performance Metrics section: the propagation scopes,
// then per metric its description, its instances per scope and its summary
// statistics.
func (b *builder) metaMetrics(w *wbuf, s uint64) {
	pScopes := s + 0x20
	pMetrics := pScopes + 16*nScopes
	w.u64(pMetrics)
	w.u32(uint32(len(b.metrics)))
	w.u8(32)
	w.u8(16)
	w.u8(24)
	w.pad(s + 0x10)
	w.u64(pScopes)
	w.u16(nScopes)
	w.u8(16)
	w.pad(pScopes)
	var ss strRefs
	for _, sc := range scopeDefs {
		ss.ref(w, sc.Name)
		w.u8(sc.Type)
		w.u8(sc.Index)
		w.pad(w.pos() + 6)
	}
	pInsts := pMetrics + 32*uint64(len(b.metrics))
	pSums := pInsts + 16*nScopes*uint64(len(b.metrics))
	for m, id := range b.metrics {
		ss.ref(w, id.Name())
		w.u64(pInsts + 16*nScopes*uint64(m))
		w.u64(pSums + 24*nScopes*nStats*uint64(m))
		w.u16(nScopes)
		w.u16(nScopes * nStats)
		w.pad(w.pos() + 4)
	}
	for m := range b.metrics {
		for sc := range nScopes {
			w.u64(pScopes + 16*uint64(sc))
			w.u16(b.propID(m, sc))
			w.pad(w.pos() + 6)
		}
	}
	for m := range b.metrics {
		for sc := range nScopes {
			for st, def := range statDefs {
				w.u64(pScopes + 16*uint64(sc))
				ss.ref(w, def.formula)
				w.u8(def.combine)
				w.u8(0)
				w.u16(b.statID(m, sc, st))
				w.pad(w.pos() + 4)
			}
		}
	}
	ss.patch(w)
}

// metaStrings is the Common String Table section; it returns where each
// string was placed.
func (b *builder) metaStrings(w *wbuf) map[string]uint64 {
	strAt := map[string]uint64{}
	add := func(v string) {
		if _, ok := strAt[v]; !ok {
			strAt[v] = w.str(v)
		}
	}
	add("main thread")
	for _, m := range b.modules {
		add(m)
	}
	for _, f := range b.files {
		add(f)
	}
	for _, f := range b.funcs {
		add(f.name)
	}
	return strAt
}

// nameTable is the Load Modules or the Source Files section (the same
// layout: flags, padding, path); it returns the address of its array. The
// flags are 0: no file is copied into the database.
func nameTable(w *wbuf, s uint64, names []string, strAt map[string]uint64) uint64 {
	p := s + 16
	w.u64(p)
	w.u32(uint32(len(names)))
	w.u16(16)
	w.pad(p)
	for _, n := range names {
		w.u32(0)
		w.u32(0)
		w.u64(strAt[n])
	}
	return p
}

// metaFuncs is the Functions section; it returns the address of its array.
func (b *builder) metaFuncs(w *wbuf, s uint64, t *metaTables) uint64 {
	pFuncs := s + 16
	w.u64(pFuncs)
	w.u32(uint32(len(b.funcs)))
	w.u16(40)
	w.pad(pFuncs)
	for _, f := range b.funcs {
		w.u64(t.strAt[f.name])
		w.u64(ptr(t.mods, 16, f.mod))
		w.u64(f.off)
		w.u64(ptr(t.files, 16, f.file))
		w.u32(0)
		w.u32(0)
	}
	return pFuncs
}

// metaContexts is the Context Tree section: header, the entry point, then
// each context's children array (contiguous, as the format requires).
func (b *builder) metaContexts(w *wbuf, s uint64, t *metaTables) {
	pEntries := s + 16
	w.u64(pEntries)
	w.u16(1)
	w.u8(32)
	w.pad(pEntries)
	arrays := map[*ctx]uint64{}
	at := pEntries + 32
	for _, c := range b.all {
		if len(c.children) == 0 {
			continue
		}
		arrays[c] = at
		for _, k := range c.children {
			at += k.size()
		}
	}
	kidsSize := func(c *ctx) uint64 {
		var n uint64
		for _, k := range c.children {
			n += k.size()
		}
		return n
	}
	e := b.entry
	w.u64(kidsSize(e))
	w.u64(arrays[e])
	w.u32(e.id)
	w.u16(1) // main thread
	w.pad(w.pos() + 2)
	w.u64(t.strAt["main thread"])
	for _, c := range b.all {
		if len(c.children) == 0 {
			continue
		}
		if w.pos() != arrays[c] {
			panic("hpctoolkit: context layout out of step") // a bug in this writer, not bad input
		}
		for _, k := range c.children {
			w.u64(kidsSize(k))
			w.u64(arrays[k])
			w.u32(k.id)
			w.u8(k.flags())
			w.u8(k.rel)
			w.u8(k.lex)
			w.u8(uint8(k.flexWords()))
			prop := uint16(0)
			if k.rel == RelLexical {
				prop = 1 // the "function" scope propagates through lexical nesting
			}
			w.u16(prop)
			w.pad(w.pos() + 6)
			if k.fn >= 0 {
				w.u64(ptr(t.funcs, 40, k.fn))
			}
			if k.file >= 0 {
				w.u64(ptr(t.files, 16, k.file))
				w.u32(k.line)
				w.u32(0)
			}
			if k.mod >= 0 {
				w.u64(ptr(t.mods, 16, k.mod))
				w.u64(k.off)
			}
		}
	}
}

type mval struct {
	id uint16
	v  float64
}

// block writes a profile-major sparse value block's arrays and returns
// (nValues, pValues, nCtxs, pCtxIndices).
func block(w *wbuf, ctxs []uint32, vals [][]mval) (uint64, uint64, uint32, uint64) {
	w.align(8)
	pValues := w.pos()
	var n uint64
	starts := make([]uint64, len(ctxs))
	for i := range ctxs {
		starts[i] = n
		for _, v := range vals[i] {
			w.u16(v.id)
			w.f64(v.v)
			n++
		}
	}
	w.align(4)
	pIdx := w.pos()
	for i, c := range ctxs {
		w.u32(c)
		w.u64(starts[i])
	}
	return n, pValues, uint32(len(ctxs)), pIdx
}

// gpuLogical is rank r's GPUDEVICE logical id: its CUDA device ordinal,
// or, where the ordinal is unknown, its GPU's index among its host's GPUs.
func (b *builder) gpuLogical(r int32) uint32 {
	gi := b.gpus.Of[r]
	g := b.gpus.List[gi]
	if n, err := strconv.ParseUint(g.Device, 10, 32); err == nil {
		return uint32(n)
	}
	var n uint32
	for _, o := range b.gpus.List[:gi] {
		if o.Host == g.Host {
			n++
		}
	}
	return n
}

// encodeProfiles writes profile.db: the profile infos (filled in as each
// profile's values are written), the identifier tuples, then the values of
// the summary profile and of each rank's.
func (b *builder) encodeProfiles(sum values, perRank []values, stats [][][nScopes]stat) []byte {
	w := header("prof", 2)
	nProf := 1 + len(b.ranks)
	var pInfos uint64
	w.section(0, func(s uint64) {
		pInfos = s + 16
		w.u64(pInfos)
		w.u32(uint32(nProf))
		w.u8(48)
		w.pad(pInfos)
		w.b = append(w.b, make([]byte, 48*nProf)...)
	})
	tuples := make([]uint64, nProf)
	w.section(1, func(uint64) { b.profTuples(w, tuples) })
	writeInfo := func(i int, nv, pv uint64, nc uint32, pc uint64, summary bool) {
		at := pInfos + 48*uint64(i)
		binary.LittleEndian.PutUint64(w.b[at:], nv)
		binary.LittleEndian.PutUint64(w.b[at+8:], pv)
		binary.LittleEndian.PutUint32(w.b[at+16:], nc)
		binary.LittleEndian.PutUint64(w.b[at+24:], pc)
		binary.LittleEndian.PutUint64(w.b[at+32:], tuples[i])
		if summary {
			binary.LittleEndian.PutUint32(w.b[at+40:], 1)
		}
	}
	// Summary profile: statistics over ranks.
	ctxs, vals := b.contextValues(func(i int, scopes []int) []mval {
		var out []mval
		for m := range b.metrics {
			for _, s := range scopes {
				if v := sum[i][m][s]; v != 0 {
					out = append(out, mval{b.statID(m, s, stSum), v})
				}
				st := stats[i][m][s]
				if !st.ok {
					continue
				}
				out = append(out, mval{b.statID(m, s, stMin), st.min}, mval{b.statID(m, s, stMax), st.max},
					mval{b.statID(m, s, stCount), st.n}, mval{b.statID(m, s, stSumSq), st.sumSq})
			}
		}
		sort.Slice(out, func(x, y int) bool { return out[x].id < out[y].id })
		return out
	})
	nv, pv, nc, pc := block(w, ctxs, vals)
	writeInfo(0, nv, pv, nc, pc, true)
	for r, v := range perRank {
		ctxs, vals := b.contextValues(func(i int, scopes []int) []mval {
			var out []mval
			for m := range b.metrics {
				for _, s := range scopes {
					if x := v[i][m][s]; x != 0 {
						out = append(out, mval{b.propID(m, s), x})
					}
				}
			}
			return out
		})
		nv, pv, nc, pc := block(w, ctxs, vals)
		writeInfo(r+1, nv, pv, nc, pc, false)
	}
	w.b = append(w.b, "_prof.db"...)
	return w.b
}

// contextValues gathers one profile's values by context, contexts without
// values left out: the global context (0) holds the execution-scope values
// of the whole program, then each context its values of every scope. of
// returns context i's values for the given scopes.
func (b *builder) contextValues(of func(i int, scopes []int) []mval) ([]uint32, [][]mval) {
	var ctxs []uint32
	var vals [][]mval
	if g := of(0, []int{scExecution}); len(g) > 0 {
		ctxs = append(ctxs, 0)
		vals = append(vals, g)
	}
	for i, c := range b.all {
		if v := of(i, []int{scPoint, scFunction, scLexAware, scExecution}); len(v) > 0 {
			ctxs = append(ctxs, c.id)
			vals = append(vals, v)
		}
	}
	return ctxs, vals
}

// profTuples is the Hierarchical Identifier Tuples section: one tuple per
// rank's profile, its address put in tuples (the summary profile has none).
func (b *builder) profTuples(w *wbuf, tuples []uint64) {
	hosts := map[string]uint32{}
	// (NODE, GPUDEVICE, RANK) where every rank's GPU is known: host →
	// GPU → rank, largest first as the format orders identifiers.
	withGPU := b.gpus.Known && len(b.gpus.List) > 0
	for i, r := range b.ranks {
		ri := b.p.Ranks[r]
		w.align(8)
		tuples[i+1] = w.pos()
		if withGPU {
			w.u16(3)
		} else {
			w.u16(2)
		}
		w.pad(w.pos() + 6)
		h, ok := hosts[ri.Host]
		if !ok {
			h = uint32(len(hosts))
			hosts[ri.Host] = h
		}
		hid := fnv.New32a()
		hid.Write([]byte(ri.Host))
		w.u8(idNode)
		w.u8(0)
		w.u16(1) // physical: the host's id
		w.u32(h)
		w.u64(uint64(hid.Sum32()))
		if withGPU {
			dev := b.gpuLogical(r)
			w.u8(idGPUDevice)
			w.u8(0)
			w.u16(0) // logical: the CUDA device ordinal on the host
			w.u32(dev)
			w.u64(uint64(dev))
		}
		w.u8(idRank)
		w.u8(0)
		w.u16(0)
		w.u32(uint32(r))
		w.u64(uint64(uint32(r)))
	}
}

func (b *builder) encodeCCT(perRank []values) []byte {
	w := header("ctxt", 1)
	n := len(b.all) + 1 // index = ctxId, 0 the global context
	var pCtxs uint64
	w.section(0, func(s uint64) {
		pCtxs = s + 16
		w.u64(pCtxs)
		w.u32(uint32(n))
		w.u8(32)
		w.pad(pCtxs)
		w.b = append(w.b, make([]byte, 32*n)...)
	})
	for id := 0; id < n; id++ {
		type pv struct {
			prof uint32
			v    float64
		}
		var mets []uint16
		var vals [][]pv
		scopes := []int{scPoint, scFunction, scLexAware, scExecution}
		i := id - 1
		if id == 0 {
			i, scopes = 0, []int{scExecution}
		}
		for m := range b.metrics {
			for _, s := range scopes {
				var list []pv
				for r, v := range perRank {
					if x := v[i][m][s]; x != 0 {
						list = append(list, pv{uint32(r + 1), x})
					}
				}
				if len(list) > 0 {
					mets = append(mets, b.propID(m, s))
					vals = append(vals, list)
				}
			}
		}
		w.align(8)
		pValues := w.pos()
		var nv uint64
		starts := make([]uint64, len(mets))
		for k := range mets {
			starts[k] = nv
			for _, x := range vals[k] {
				w.u32(x.prof)
				w.f64(x.v)
				nv++
			}
		}
		w.align(2)
		pIdx := w.pos()
		for k, m := range mets {
			w.u16(m)
			w.u64(starts[k])
		}
		at := pCtxs + 32*uint64(id)
		binary.LittleEndian.PutUint64(w.b[at:], nv)
		binary.LittleEndian.PutUint64(w.b[at+8:], pValues)
		binary.LittleEndian.PutUint16(w.b[at+16:], uint16(len(mets)))
		binary.LittleEndian.PutUint64(w.b[at+24:], pIdx)
	}
	w.b = append(w.b, "__ctx.db"...)
	return w.b
}

// encodeYAML writes the metric taxonomy hpcviewer presents: every metric
// with Sum, Mean, Min and Max variants (inclusive = execution scope,
// exclusive = function scope), and the redundancy fractions.
func (b *builder) encodeYAML() []byte {
	var y strings.Builder
	anchor := func(m profile.MetricID, scope, stat string) string {
		var a strings.Builder
		for _, c := range m.Name() {
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' {
				a.WriteRune(c)
			} else {
				fmt.Fprintf(&a, "x%02x", c)
			}
		}
		return a.String() + "-" + stat + "-" + scope
	}
	y.WriteString("version: 0\ninputs:\n")
	for _, m := range b.metrics {
		for _, sc := range []string{"execution", "function"} {
			for _, st := range []struct{ name, formula, combine string }{
				{"sum", "$$", "sum"}, {"min", "$$", "min"}, {"max", "$$", "max"}, {"cnt", "1", "sum"},
			} {
				fmt.Fprintf(&y, "  - &%s\n    metric: %q\n    scope: %s\n    formula: %q\n    combine: %s\n",
					anchor(m, sc, st.name), m.Name(), sc, st.formula, st.combine)
			}
		}
	}
	y.WriteString("roots:\n")
	for _, m := range b.metrics {
		fmt.Fprintf(&y, "  - name: %q\n    description: %q\n    variants:\n", m.Name(), view.MetricDescription(m.Name()))
		for _, v := range []struct{ name, stat string }{{"Sum", "sum"}, {"Mean", ""}, {"Min", "min"}, {"Max", "max"}} {
			render := "[number, percent]"
			if v.name != "Sum" {
				render = "[number]"
			}
			fmt.Fprintf(&y, "      %s:\n        render: %s\n        formula:\n", v.name, render)
			for _, sc := range []struct{ key, scope string }{{"inclusive", "execution"}, {"exclusive", "function"}} {
				if v.stat != "" {
					fmt.Fprintf(&y, "          %s:\n            standard: *%s\n", sc.key, anchor(m, sc.scope, v.stat))
				} else {
					fmt.Fprintf(&y, "          %s:\n            standard: {/: [*%s, *%s]}\n", sc.key, anchor(m, sc.scope, "sum"), anchor(m, sc.scope, "cnt"))
				}
			}
		}
	}
	byName := map[string]profile.MetricID{}
	for _, m := range b.metrics {
		byName[m.Name()] = m
	}
	for _, f := range view.Fractions {
		num, ok1 := byName[f.Num]
		den, ok2 := byName[f.Den]
		if !ok1 || !ok2 {
			continue
		}
		fmt.Fprintf(&y, "  - name: %q\n    description: %q\n    format: \"%%.3f\"\n    variants:\n      \"\":\n        render: [number]\n        formula:\n", f.Name, f.Description)
		for _, sc := range []struct{ key, scope string }{{"inclusive", "execution"}, {"exclusive", "function"}} {
			fmt.Fprintf(&y, "          %s:\n            standard: {/: [*%s, *%s]}\n", sc.key, anchor(num, sc.scope, "sum"), anchor(den, sc.scope, "sum"))
		}
	}
	return []byte(y.String())
}
