package analysis_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/sass"
	"gpuprof/symname"
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
	"single_value":  {"float32", nil},
	"dominant_load": {"float32", nil},
	"loop_reload":   {"float32", nil},
	"strided":       {"float32", nil},
	"spill":         {"float32", nil},
	"divergent":     {"float32", nil},
	"bank_conflict": {"float32", nil},
	"stall_exec":    {"float32", nil},
	// sinf/cosf inline their range reduction, which loads the 2/pi bits
	// table (unsigned int) at the caller's line.
	"reload_compute": {"float32", []kindRule{{"evolve_", "sinf(v)", []string{"float32", "int32"}}}},
	"mpi_imbalance":  {"float32", []kindRule{{"relax", "sinf(v)", []string{"float32", "int32"}}}},
	"no_gain":        {"float32", []kindRule{{"polish_", "sinf(v)", []string{"float32", "int32"}}}},
	"stall_memory":   {"int32", nil},
	"wide_type": {"float32", []kindRule{
		{"classify<long long>", "label[i] =", []string{"int64"}},
		{"classify<unsigned char>", "label[i] =", []string{"int8"}},
		{"apply_class_weight<long long>", "table[label[i]]", []string{"int64", "float32"}},
		{"apply_class_weight<unsigned char>", "table[label[i]]", []string{"int8", "float32"}},
	}},
}

// TestAccessKindsAgreeWithSource checks the access kind the SASS slicing
// infers for every load and store of every nvdisasm listing of the test
// programs against the types their sources declare. Every memory
// instruction is accounted for: constant loads must have no kind (the
// Sanitizer API does not report them), local ones are counted apart
// (spills), and every other one must have a kind and a line of the
// program's source.
func TestAccessKindsAgreeWithSource(t *testing.T) {
	d, _ := findValidationDirs()
	found := 0
	progs, _ := filepath.Glob(filepath.Join(d.src, "*.cu"))
	for _, srcPath := range progs {
		prog := strings.TrimSuffix(filepath.Base(srcPath), ".cu")
		listings, _ := filepath.Glob(filepath.Join(d.sass, prog, "*.txt"))
		if len(listings) == 0 {
			continue
		}
		spec, ok := accessKinds[prog]
		if !ok {
			t.Errorf("%s: listings in %s but no expected kinds in accessKinds", prog, filepath.Join(d.sass, prog))
			continue
		}
		src, err := os.ReadFile(srcPath)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(src), "\n")
		for _, path := range listings {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			m, err := sass.Parse(b)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			found++
			name := prog + "/" + filepath.Base(path)
			checked, undecided, constant, local := 0, 0, 0, 0
			for _, f := range m.Functions {
				kinds := f.AccessKinds()
				for i := range f.Insts {
					in := &f.Insts[i]
					if in.Class != sass.ClassMemory || in.Mem.Op == sass.MemNone {
						continue
					}
					k := kinds[i]
					where := fmt.Sprintf("%s %s+%#x %s", name, symname.Short(f.Name), in.Offset, in.Text())
					switch in.Mem.Space {
					case sass.SpaceConstant:
						constant++
						if k.Vec != 0 {
							t.Errorf("%s: constant load has kind %v", where, k)
						}
						continue
					case sass.SpaceLocal:
						// Spills hold whatever the spilled register held:
						// local memory has no source type to compare with.
						local++
						continue
					}
					if k.Vec == 0 {
						t.Errorf("%s: no access kind", where)
						continue
					}
					l := m.Location(in.Loc)
					if l.File < 0 || !strings.HasSuffix(m.File(l.File), prog+".cu") || l.Line <= 0 || int(l.Line) > len(lines) {
						t.Errorf("%s: no line of %s.cu to check against", where, prog)
						continue
					}
					line := lines[l.Line-1]
					allowed := []string{spec.def}
					for _, r := range spec.rules {
						if strings.HasPrefix(symname.Short(f.Name), r.kernel) && strings.Contains(line, r.marker) {
							allowed = r.kinds
						}
					}
					got := fmt.Sprintf("%s%d", k.Type, k.UnitBits)
					checked++
					if k.Fallback {
						// Slicing found no instruction that reads the value as
						// a type (a copy): the width must still be the source's.
						undecided++
						got = fmt.Sprintf("%d", k.UnitBits)
						ok := false
						for _, a := range allowed {
							ok = ok || strings.HasSuffix(a, got) && !strings.HasSuffix(a, "1"+got)
						}
						if !ok {
							t.Errorf("%s (line %d): falls back to %v, wrong width for %v", where, l.Line, k, allowed)
						}
						continue
					}
					if !containsStr(allowed, got) {
						t.Errorf("%s (line %d %q): %v, want one of %v", where, l.Line, strings.TrimSpace(line), k, allowed)
					}
				}
			}
			if checked == 0 {
				t.Errorf("%s: no global, shared or generic load or store", name)
			}
			t.Logf("%s: %d loads/stores checked (%d undecided: width only), %d constant, %d local", name, checked, undecided, constant, local)
		}
	}
	if found == 0 {
		t.Fatal("no nvdisasm listings of the test programs (testdata/sass/<prog>, committed)")
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
