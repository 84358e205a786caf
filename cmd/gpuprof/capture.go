package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gpuprof/collector/capture"
	"gpuprof/collector/online"
	"gpuprof/profile"
	"gpuprof/sass"
)

func init() {
	register("capture", "make small test captures from recorded raw streams (trim)", cmdCapture)
}

func cmdCapture(args []string) error {
	if len(args) == 0 || args[0] != "trim" {
		return errors.New("usage: gpuprof capture trim [flags] IN OUT (gpuprof capture trim --help)")
	}
	fs := newFlags("capture trim", "[flags] IN OUT", `
Writes a copy of the raw stream IN (gpuprof collect --record) to OUT without
what a test replay of it does not need: the bytes of its GPU modules (each
module's content hash stays, in a MODULE_HASH frame), the FUNCTION frames of
functions that were never launched, sampled, counted or hit by an access
record, and with --max-access the access records of the traced launches over
that many bytes (those launches become untraced). Everything else is kept.

With --listings DIR (where nvdisasm is: the CUDA toolkit), the nvdisasm
listings of the kept functions are written to DIR/HASH.sass.zst (zstd of
nvdisasm's text; HASH.hex.txt with --text), one file per module: a replay
given --sass DIR finds them by the module's hash.

  gpuprof capture trim --listings testdata/sass/torch train.gpr testdata/captures/torch.pcsampling.gpr`)
	listings := fs.String("listings", "", "write the nvdisasm listings of the kept functions here (needs nvdisasm)")
	plain := fs.Bool("text", false, "write the listings as text (HASH.hex.txt) rather than zstd-compressed")
	maxAccess := fs.String("max-access", "", "keep at most this many bytes of access records (e.g. 3M; whole launches)")
	if err := parseAll(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errors.New("give IN and OUT")
	}
	var o capture.Options
	if *maxAccess != "" {
		v, err := online.ParseBytes(*maxAccess)
		if err != nil {
			return fmt.Errorf("--max-access: %w", err)
		}
		o.MaxAccess = v
	}
	in, outPath := fs.Arg(0), fs.Arg(1)
	out, err := os.Create(outPath)
	if err != nil {
		return err
	}
	r, err := capture.Trim(in, out, o)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(outPath)
		return err
	}
	fmt.Printf("%s: %d -> %d bytes; %d modules (%d bytes of them dropped), %d of %d functions kept; %d of %d launches untraced (access records %d of %d bytes kept)",
		outPath, r.InBytes, r.OutBytes, len(r.Modules), r.ModuleBytesDropped, r.FunctionsKept, r.Functions, r.LaunchesUntraced, r.Launches, r.AccessBytesKept, r.AccessBytes)
	if r.Truncated {
		fmt.Print("; the input ends without END, and so does the output")
	}
	fmt.Println()
	if *listings == "" {
		return nil
	}
	return writeListings(*listings, r, *plain)
}

// writeListings writes the listings of the kept functions of every module,
// one file per module, named by its content hash.
func writeListings(dir string, r *capture.Result, plain bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src := &online.SASS{Cache: online.DefaultDiskCache(), Logf: func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }}
	var missing []string
	for _, m := range r.Modules {
		if len(m.Functions) == 0 {
			continue
		}
		h := profile.ModuleHash(m.Hash)
		ref := online.ModuleRef{Hash: h, Cubin: m.Bytes, SM: r.SM, Functions: m.Functions}
		texts, whys := src.Listings(ref, m.Functions)
		var pieces [][]byte
		for _, fn := range m.Functions {
			if text := texts[fn]; text != nil {
				pieces = append(pieces, text)
			} else {
				missing = append(missing, fmt.Sprintf("%v %s: %s", h, fn, whys[fn]))
			}
		}
		if len(pieces) == 0 {
			continue
		}
		p := filepath.Join(dir, h.String()+".sass.zst")
		if plain {
			p = filepath.Join(dir, h.String()+".hex.txt")
		}
		// Captures of one program share modules: a listing already there
		// keeps its functions.
		if old, err := online.ReadListingFile(p); err == nil {
			pieces = append([][]byte{old}, pieces...)
		}
		text := sass.JoinListings(pieces...)
		if !plain {
			text = sass.EncodeListing(text)
		}
		if err := os.WriteFile(p, text, 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %d functions\n", p, len(pieces))
	}
	src.Close()
	st := src.Stats()
	fmt.Printf("listings: %d functions disassembled in %d nvdisasm runs (%d modules whole), %d from the listings cache\n", st.Functions, st.Disassembled, st.Whole, st.CacheHits)
	if len(missing) > 0 {
		for _, m := range missing {
			fmt.Fprintln(os.Stderr, "no listing:", m)
		}
		return fmt.Errorf("%d kept functions without a listing", len(missing))
	}
	return nil
}
