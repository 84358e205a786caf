package analysis_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/sass"
)

// kindRule gives the source type of the memory accesses at the lines of a
// kernel that contain marker (every marker of the program's kernels that
// no rule names holds the program's default type).
type kindRule struct {
	kernel, marker string
	kinds          []string // allowed kinds at that line
}

var accessKinds = map[string]struct {
	def   string
	rules []kindRule
}{
	"single_value":   {"float32", nil},
	"dominant_load":  {"float32", nil},
	"loop_reload":    {"float32", nil},
	"strided":        {"float32", nil},
	"spill":          {"float32", nil},
	"divergent":      {"float32", nil},
	"bank_conflict":  {"float32", nil},
	"stall_exec":     {"float32", nil},
	"reload_compute": {"float32", nil},
	"mpi_imbalance":  {"float32", nil},
	"stall_memory":   {"int32", nil},
	"wide_type": {"float32", []kindRule{
		{"void classify<long>", "label[i] =", []string{"int64"}},
		{"void classify<unsigned char>", "label[i] =", []string{"int8"}},
		{"void apply_class_weight<long>", "table[label[i]]", []string{"int64", "float32"}},
		{"void apply_class_weight<unsigned char>", "table[label[i]]", []string{"int8", "float32"}},
	}},
}

// TestAccessKindsAgreeWithSource checks the access kind the SASS slicing
// infers for every load and store of the test programs against the types
// their sources declare.
func TestAccessKindsAgreeWithSource(t *testing.T) {
	d, _ := findValidationDirs()
	found := 0
	for prog, spec := range accessKinds {
		var m *sass.Module
		for _, name := range []string{prog + ".sass.txt", prog + ".hex.txt"} {
			b, err := os.ReadFile(filepath.Join(d.sass, prog, name))
			if err != nil {
				continue
			}
			if m, err = sass.Parse(b); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			break
		}
		if m == nil {
			continue
		}
		src, err := os.ReadFile(filepath.Join(d.src, prog+".cu"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(src), "\n")
		found++
		checked, wrong := 0, 0
		for _, f := range m.Functions {
			kinds := f.AccessKinds()
			for i := range f.Insts {
				in := &f.Insts[i]
				if in.Class != sass.ClassMemory || in.Mem.Space == sass.SpaceConstant || kinds[i].Vec == 0 {
					continue
				}
				l := m.Location(in.Loc)
				if l.File < 0 || !strings.HasSuffix(m.File(l.File), prog+".cu") || int(l.Line) > len(lines) {
					continue
				}
				line := lines[l.Line-1]
				allowed := []string{spec.def}
				for _, r := range spec.rules {
					if strings.HasPrefix(analysis.Demangle(f.Name), r.kernel) && strings.Contains(line, r.marker) {
						allowed = r.kinds
					}
				}
				k := kinds[i]
				got := fmt.Sprintf("%s%d", k.Type, k.UnitBits)
				checked++
				if k.Fallback || !containsStr(allowed, got) {
					wrong++
					t.Errorf("%s %s+%#x (line %d %q): %s is %v, want one of %v", prog, analysis.Demangle(f.Name), in.Offset, l.Line, strings.TrimSpace(line), in.Text(), k, allowed)
				}
			}
		}
		t.Logf("%s: %d memory instructions checked, %d disagree", prog, checked, wrong)
	}
	if found == 0 {
		t.Skip("no nvdisasm listings of the test programs (testdata/sass/<prog>)")
	}
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
