package view

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"gpuprof/profile"
)

// Library names the host library that launched kernel context k: the
// module of its innermost host frame (the collector has already dropped
// the frames of the CUDA runtime and driver), such as libcublasLt.so.13.
// "" when the launch has no host frames.
func Library(p *profile.Profile, k profile.NodeID) string {
	n := p.Nodes[k]
	if n == nil {
		return ""
	}
	par := p.Nodes[n.Parent]
	if par == nil || par.Frame.Kind != profile.KindHostFrame || par.Frame.Module == "" {
		return ""
	}
	return filepath.Base(par.Frame.Module)
}

// NoSource is a kernel context whose instructions the report cannot tie
// to source lines.
type NoSource struct {
	Node    profile.NodeID
	Name    string // demangled
	Library string
	// Why: the collector's reasons for functions left without structure
	// (with the ranks, summed over functions, where each applied), or
	// "no line table" for code whose structure has no lines (a library
	// shipped without line information: cuBLAS, cuDNN, NCCL).
	Why string
}

// reasonText explains the collector's reasons (collector/online).
var reasonText = map[string]string{
	"unknown_module": "launched before its module was loaded, and never found in one",
	"no_cubin":       "the module's bytes were not in the stream and no listing of it was found",
	"no_nvdisasm":    "no nvdisasm (CUDA toolkit) and no listing of it was found",
	"nvdisasm":       "nvdisasm failed",
	"not_in_module":  "not among the module's functions",
	"bad_listing":    "its listing did not parse",
	"timeout":        "its structure was not ready within the bound",
}

// NoSourceKernels lists the kernel contexts with measured instructions
// but no source lines, by descending GPU time.
func NoSourceKernels(p *profile.Profile) []NoSource {
	// Instruction nodes below each kernel, and whether a line is above them.
	type acc struct{ insts, lined int }
	per := map[profile.NodeID]*acc{}
	for _, n := range p.Nodes {
		if n.Frame.Kind != profile.KindInstruction {
			continue
		}
		lined := false
		k := profile.RootID
		for cur := p.Nodes[n.Parent]; cur != nil; cur = p.Nodes[cur.Parent] {
			if cur.Frame.Kind == profile.KindLine {
				lined = true
			}
			if cur.Frame.Kind == profile.KindKernel {
				k = cur.ID
				break
			}
			if cur.ID == cur.Parent {
				break
			}
		}
		if k == profile.RootID {
			continue
		}
		a := per[k]
		if a == nil {
			a = &acc{}
			per[k] = a
		}
		a.insts++
		if lined {
			a.lined++
		}
	}
	var out []NoSource
	for _, k := range Kernels(p) {
		n := p.Nodes[k.Node]
		var why []string
		for _, mv := range n.Metrics {
			name := mv.ID.Name()
			if code, ok := strings.CutPrefix(name, profile.StructureMissingPrefix); ok && mv.V > 0 {
				text := reasonText[code]
				if text == "" {
					text = code
				}
				if mv.V > 1 {
					text += fmt.Sprintf(" (%d ranks or functions)", mv.V)
				}
				why = append(why, text)
			}
		}
		sort.Strings(why)
		a := per[k.Node]
		switch {
		case len(why) > 0:
		case a != nil && a.insts > 0 && a.lined == 0:
			why = []string{"no line table"}
		default:
			continue
		}
		out = append(out, NoSource{Node: k.Node, Name: k.Full, Library: Library(p, k.Node), Why: strings.Join(why, "; ")})
	}
	return out
}
