package text

import "gpuprof/viewer-export/internal/view"

// noSource lists the kernels whose instructions have no source lines:
// closed-source libraries (no line table) and kernels the collector left
// without structure, with why and the library that launched them. Their
// advice is at the level of the function and its instructions.
func (r *report) noSource() {
	ks := view.NoSourceKernels(r.p)
	if len(ks) == 0 {
		return
	}
	r.section("Kernels without source lines (advice at function level)")
	rows := [][]string{{"library", "why", "kernel"}}
	seen := map[[3]string]bool{}
	for _, k := range ks {
		key := [3]string{k.Library, k.Why, k.Name}
		if seen[key] { // the same kernel from another calling context
			continue
		}
		seen[key] = true
		if len(rows) > r.o.Top {
			rows = append(rows, []string{"...", "", ""})
			break
		}
		lib := k.Library
		if lib == "" {
			lib = "-"
		}
		name := k.Name
		if len(name) > 120 {
			name = name[:117] + "..."
		}
		rows = append(rows, []string{lib, k.Why, name})
	}
	r.table(rows)
}
