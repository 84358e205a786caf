// Package capture makes small test captures from recorded raw streams
// (docs/wire.md): a framework's stream carries hundreds of MB of cubins
// and thousands of functions, of which a run uses a few. Trim keeps what
// the analysis of the run uses and names the modules' content hashes in
// MODULE_HASH frames, so that listings made from the real cubins (by
// hash) still serve the trimmed stream.
package capture

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/cespare/xxhash/v2"

	"gpuprof/collector/rawstream"
)

// Options shape Trim.
type Options struct {
	// MaxAccess bounds the ACCESS bytes kept (0: all). Whole launches are
	// kept, in stream order, while they fit; the others become launches
	// that were not traced (as kernel sampling leaves them).
	MaxAccess int64
}

// Module is a module whose bytes Trim dropped, with the functions of it
// that the trimmed stream keeps: what a listing must hold.
type Module struct {
	ID        uint64
	Hash      uint64 // xxhash64 of Bytes, the collector's content hash
	Bytes     []byte
	Functions []string
}

// Result says what Trim did.
type Result struct {
	SM                                uint16 // the stream's compute capability × 10
	Modules                           []*Module
	Functions, FunctionsKept          int
	Launches, LaunchesUntraced        int
	AccessBytes, AccessBytesKept      int64
	InBytes, OutBytes                 int64
	Truncated                         bool // the input ends without END: so does the output
	ModuleBytesDropped, FramesDropped int64
	functionsUsed                     map[string]bool
	untraced                          map[uint64]bool
}

// Trim reads the raw stream at in twice and writes to out the same stream
// less the bytes of its modules (each MODULE with bytes becomes a
// MODULE_HASH frame and a MODULE without them), less the FUNCTION frames
// of functions never launched, sampled, counted or hit by an access
// record, and, with MaxAccess, less the access records of the launches
// over the budget. Everything else is kept as it was.
func Trim(in string, out io.Writer, o Options) (*Result, error) {
	r := &Result{functionsUsed: map[string]bool{}, untraced: map[uint64]bool{}}
	if err := r.survey(in, o); err != nil {
		return nil, err
	}
	if err := r.write(in, out); err != nil {
		return nil, err
	}
	return r, nil
}

// each calls do with every frame of the stream at path, in order, and
// returns the bytes read. A stream cut short ends like a whole one (the
// output is cut at the same frame: Truncated); other errors are returned.
func (r *Result) each(path string, do func(rawstream.Frame) error) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	d := rawstream.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	r.Truncated = false
	for {
		fr, err := d.Next()
		if err == io.EOF {
			return d.Bytes(), nil
		}
		var re *rawstream.Error
		if errors.As(err, &re) && re.Truncated {
			r.Truncated = true
			return d.Bytes(), nil
		}
		if err != nil {
			return d.Bytes(), fmt.Errorf("%s: %w", path, err)
		}
		if err := do(fr); err != nil {
			return d.Bytes(), err
		}
	}
}

// survey is the first pass: modules, functions, what is used, and the
// access bytes of each launch.
func (r *Result) survey(in string, o Options) error {
	type fn struct {
		module   uint64
		name     string
		pc, size uint64
	}
	var fns []fn
	byID := map[uint32]int{}
	mods := map[uint64]*Module{}
	used := map[uint32]bool{}
	pcs := map[uint64]bool{}
	access := map[uint64]int64{}
	var order []uint64
	n, err := r.each(in, func(fr rawstream.Frame) error {
		switch x := fr.(type) {
		case *rawstream.Hello:
			r.SM = x.SM
		case *rawstream.Module:
			if x.HasBytes {
				if _, ok := mods[x.ModuleID]; !ok {
					m := &Module{ID: x.ModuleID, Hash: xxhash.Sum64(x.Bytes), Bytes: x.Bytes}
					mods[x.ModuleID] = m
					r.Modules = append(r.Modules, m)
				}
			}
		case *rawstream.Function:
			byID[x.FunctionID] = len(fns)
			fns = append(fns, fn{x.ModuleID, x.Name, x.PC, uint64(x.Size)})
		case *rawstream.Launch:
			used[x.FunctionID] = true
			if x.Instrumented {
				order = append(order, x.LaunchID)
			}
			r.Launches++
		case *rawstream.PCSamples:
			for _, s := range x.PCs {
				used[s.FunctionID] = true
			}
		case *rawstream.InstrCounts:
			for _, c := range x.Counts {
				used[c.FunctionID] = true
			}
		case *rawstream.Access:
			access[x.LaunchID] += int64(len(x.Data)) + 12
			r.AccessBytes += int64(len(x.Data)) + 12
			it := x.RecordHeaders()
			for it.Next() {
				pcs[it.Record().PC] = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.InBytes = n
	for id := range used {
		if i, ok := byID[id]; ok {
			r.functionsUsed[fns[i].name] = true
		}
	}
	// Functions hit by access records (a record's PC may lie in another
	// function than its launch's).
	sorted := make([]fn, 0, len(fns))
	for _, f := range fns {
		if f.pc != 0 && f.size != 0 {
			sorted = append(sorted, f)
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].pc < sorted[j].pc })
	for pc := range pcs {
		i := sort.Search(len(sorted), func(i int) bool { return sorted[i].pc > pc }) - 1
		if i >= 0 && pc-sorted[i].pc < sorted[i].size {
			r.functionsUsed[sorted[i].name] = true
		}
	}
	r.Functions = len(fns)
	for _, f := range fns {
		if !r.functionsUsed[f.name] {
			continue
		}
		r.FunctionsKept++
		if m := mods[f.module]; m != nil && !contains(m.Functions, f.name) {
			m.Functions = append(m.Functions, f.name)
		}
	}
	for _, m := range r.Modules {
		sort.Strings(m.Functions)
	}
	if o.MaxAccess > 0 {
		var kept int64
		for _, l := range order {
			if kept+access[l] <= o.MaxAccess {
				kept += access[l]
				continue
			}
			r.untraced[l] = true
			r.LaunchesUntraced++
		}
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// write is the second pass.
func (r *Result) write(in string, out io.Writer) error {
	bw := bufio.NewWriterSize(out, 1<<20)
	w := rawstream.NewWriter(bw)
	_, err := r.each(in, func(fr rawstream.Frame) error {
		switch x := fr.(type) {
		case *rawstream.Module:
			if x.HasBytes {
				if err := w.Write(&rawstream.ModuleHash{ModuleID: x.ModuleID, ContentKey: x.ContentKey, Hash: xxhash.Sum64(x.Bytes), Size: x.Size}); err != nil {
					return err
				}
				r.ModuleBytesDropped += int64(len(x.Bytes))
				fr = &rawstream.Module{ModuleID: x.ModuleID, ContentKey: x.ContentKey, Size: x.Size}
			}
		case *rawstream.Function:
			if !r.functionsUsed[x.Name] {
				r.FramesDropped++
				return nil
			}
		case *rawstream.Launch:
			if r.untraced[x.LaunchID] {
				c := *x
				c.Instrumented = false
				fr = &c
			}
		case *rawstream.Access:
			if r.untraced[x.LaunchID] {
				r.FramesDropped++
				return nil
			}
			r.AccessBytesKept += int64(len(x.Data)) + 12
		case *rawstream.KernelEnd:
			if r.untraced[x.LaunchID] {
				c := *x
				c.BlocksSampled, c.Records = 0, 0
				fr = &c
			}
		}
		return w.Write(fr)
	})
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	r.OutBytes = w.Bytes()
	return nil
}
