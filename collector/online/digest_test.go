package online

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// TestCaptureDigests guards changes meant to make the analysis faster
// without changing what it finds: with GPUPROF_PROFILE_DIGESTS=FILE it
// analyses every committed capture at the collector's default settings
// (an item every 2^18 access records, default options, 2 and 16 workers),
// merges the items, and compares the SHA-256 of each merged profile's
// encoding with FILE's line for the capture, or writes FILE when it does
// not exist yet. Run it once before such a change and once after:
//
//	GPUPROF_PROFILE_DIGESTS=/tmp/digests go test -run TestCaptureDigests ./collector/online/
//
// The digests depend on the analysis' results, which other changes may
// alter on purpose, so none are committed.
func TestCaptureDigests(t *testing.T) {
	file := os.Getenv("GPUPROF_PROFILE_DIGESTS")
	if file == "" {
		t.Skip("GPUPROF_PROFILE_DIGESTS not set")
	}
	got := map[string]string{}
	for _, c := range loadCaptures(t, captureGlob("*.gpr")) {
		var first string
		for _, w := range []int{2, 16} {
			p, _ := analyseRecords(t, c.data, Options{Workers: w, Structures: c.st}, 1<<18)
			sum := fmt.Sprintf("%x", sha256.Sum256(p.Encode()))
			if first == "" {
				first = sum
			} else if sum != first {
				t.Errorf("%s: %d workers give %s, 2 give %s", c.name, w, sum, first)
			}
		}
		got[c.name] = first
	}
	want, err := readDigests(file)
	if os.IsNotExist(err) {
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "%s %s\n", n, got[n])
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d digests to %s", len(got), file)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for n, d := range got {
		if w, ok := want[n]; !ok {
			t.Errorf("%s: no digest in %s", n, file)
		} else if w != d {
			t.Errorf("%s: profile digest %s, %s has %s", n, d, file, w)
		}
	}
}

func readDigests(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, sum, ok := strings.Cut(sc.Text(), " "); ok {
			out[name] = sum
		}
	}
	return out, sc.Err()
}
