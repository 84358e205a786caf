package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// plantedForms are the ways the planted values can be written: their raw
// bits little-endian at every unit width, as the profile encoding's
// varints, and as reports print them.
func plantedForms() (bin [][]byte, text []string) {
	f32 := uint64(math.Float32bits(float32(synth.PlantedFloat)))
	f64 := math.Float64bits(synth.PlantedFloat)
	for _, v := range []uint64{synth.PlantedInt, f32, f64} {
		var le [8]byte
		binary.LittleEndian.PutUint64(le[:], v)
		width := 8
		if v>>32 == 0 {
			width = 4
		}
		bin = append(bin, le[:width], binary.AppendUvarint(nil, v))
		text = append(text, fmt.Sprintf("%#x", v), strconv.FormatUint(v, 10))
	}
	text = append(text, "4242.42", strconv.Itoa(synth.PlantedInt))
	return bin, text
}

// findPlanted returns where in data a form of the planted values occurs
// ("" if nowhere).
func findPlanted(data []byte) string {
	bin, text := plantedForms()
	for _, b := range bin {
		if i := bytes.Index(data, b); i >= 0 {
			return fmt.Sprintf("bytes % x at offset %d", b, i)
		}
	}
	for _, s := range text {
		if i := bytes.Index(data, []byte(s)); i >= 0 {
			return fmt.Sprintf("%q at offset %d", s, i)
		}
	}
	return ""
}

// sketches calls f with every value sketch of p.
func sketches(p *profile.Profile, f func(where string, s *profile.ValueSketch)) {
	for k, st := range p.PCs {
		if st.Values != nil {
			f(fmt.Sprintf("pc %+v", k), st.Values)
		}
	}
	for k, st := range p.ObjStats {
		if st.Values != nil {
			f(fmt.Sprintf("object %+v", k), st.Values)
		}
	}
}

// outputsOf reads every file gpuprof wrote into out, decompressed.
func outputsOf(t *testing.T, out string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(path, string(filepath.Separator)+"broker"+string(filepath.Separator)) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(path, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		files[path] = b
		return nil
	})
	p, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	files["profile encoding"] = p.Encode() // profile.gpuprof is zstd-compressed
	return files
}

// --no-values: a job whose every access carries a planted value. Without
// the option its profile holds the value (the check finds it, so it would
// find a leak); with it, no output holds the value in any form, byte for
// byte, nor does what a collector publishes; every sketch holds hashes,
// with the same counts, and everything else, redundancy fractions
// included, is byte-identical to the plain profile.
func TestNoValues(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := buildGpuprof(t)
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: 2, Seed: 61, Pattern: synth.PatternPlanted})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	run := func(name string, extra ...string) string {
		t.Helper()
		l := newFakeLauncher(t)
		out := filepath.Join(t.TempDir(), name)
		args := append([]string{"run", "-o", out, "--job", "values", "--sass", sassDir, "--batch-records", "4096", "--batch-interval", "1h",
			"--replay", filepath.Join(streams, "rank{rank:4}.gpraw")}, extra...)
		b, err := exec.Command(bin, append(args, "--", l.path, "-np", "2")...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		return out
	}
	plainDir, hiddenDir := run("plain"), run("hidden", "--no-values")

	plain, err := profile.ReadFile(plainDir)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	sketches(plain, func(where string, s *profile.ValueSketch) {
		if v, _ := s.Dominant(); v == synth.PlantedInt || v == uint64(math.Float32bits(float32(synth.PlantedFloat))) || v == math.Float64bits(synth.PlantedFloat) {
			found++
		}
	})
	if found == 0 {
		t.Fatal("the plain profile's sketches do not hold the planted value: the test plants nothing")
	}
	if where := findPlanted(plain.Encode()); where == "" {
		t.Fatal("the byte search does not find the planted value in the plain profile")
	}
	for path, b := range outputsOf(t, plainDir) {
		if where := findPlanted(b); where != "" {
			t.Logf("without --no-values, %s holds the planted value (%s)", filepath.Base(path), where)
		}
	}
	rep, _ := os.ReadFile(filepath.Join(plainDir, "report.txt"))
	if !bytes.Contains(rep, []byte("value sketches hold values read from the application's memory")) {
		t.Error("the plain report does not say that its sketches hold the application's values")
	}

	hidden, err := profile.ReadFile(hiddenDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sketches(hidden, func(where string, s *profile.ValueSketch) {
		n++
		if s.Kind != profile.ValHashed || s.Min != 0 || s.Max != 0 {
			t.Errorf("%s: sketch kind %v, range [%#x, %#x]: want hashes only", where, s.Kind, s.Min, s.Max)
		}
	})
	if n == 0 {
		t.Fatal("the --no-values profile has no sketch: counts were dropped, not hashed")
	}
	for path, b := range outputsOf(t, hiddenDir) {
		if where := findPlanted(b); where != "" {
			t.Errorf("--no-values: %s holds the planted value (%s)", path, where)
		}
	}
	rep, _ = os.ReadFile(filepath.Join(hiddenDir, "report.txt"))
	if !bytes.Contains(rep, []byte("hidden (--no-values)")) {
		t.Error("the --no-values report does not say the values are hidden")
	}
	// What one collector publishes (its items merged in a local file).
	item := filepath.Join(t.TempDir(), "rank0.gpuprof")
	if b, err := exec.Command(bin, "collect", "--no-values", "--job", "values", "--rank", "0", "--sass", sassDir, "--replay", files[0], "--local", item).CombinedOutput(); err != nil {
		t.Fatalf("gpuprof collect --no-values: %v\n%s", err, b)
	}
	local, err := profile.ReadFile(item)
	if err != nil {
		t.Fatal(err)
	}
	if where := findPlanted(local.Encode()); where != "" {
		t.Errorf("a collector's items hold the planted value (%s)", where)
	}

	// Counts and fractions stay: the same totals and dominant counts per
	// sketch, and the profiles equal once the sketches are set aside.
	sketches(plain, func(where string, s *profile.ValueSketch) {
		var h *profile.ValueSketch
		sketches(hidden, func(w string, x *profile.ValueSketch) {
			if w == where {
				h = x
			}
		})
		_, pc := s.Dominant()
		if h == nil {
			t.Errorf("%s: no sketch with --no-values", where)
			return
		}
		if _, hc := h.Dominant(); h.Total != s.Total || hc != pc || len(h.Top) != len(s.Top) {
			t.Errorf("%s: total %d, dominant count %d, %d listed with --no-values; %d, %d, %d without", where, h.Total, hc, len(h.Top), s.Total, pc, len(s.Top))
		}
	})
	for _, p := range []*profile.Profile{plain, hidden} {
		for _, st := range p.PCs {
			st.Values = nil
		}
		for _, st := range p.ObjStats {
			st.Values = nil
		}
	}
	if !bytes.Equal(plain.Encode(), hidden.Encode()) {
		t.Errorf("apart from the sketches, the --no-values profile differs:\n%s", firstDiff(hidden.String(), plain.String(), "hidden", "plain"))
	}
}
