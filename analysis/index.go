package analysis

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"gpuprof/profile"
	"gpuprof/symname"
)

// Index answers the questions every analysis asks of a merged profile:
// which calling-context node an instruction of a kernel context is, where
// it is in the source, and what the kernel contexts are.
type Index struct {
	P        *profile.Profile
	Children map[profile.NodeID][]profile.NodeID
	// Inst maps (kernel context, PC) to its instruction node.
	Inst map[InstKey]profile.NodeID
	// PCOf is the inverse of Inst.
	PCOf map[profile.NodeID]profile.PC
	// Kernels lists the kernel nodes, by descending GPU time.
	Kernels []profile.NodeID
	// KernelTime is each kernel node's inclusive gpu.time_ns; JobTime
	// their sum.
	KernelTime map[profile.NodeID]uint64
	JobTime    uint64
	inc        map[profile.NodeID]profile.Values

	phase      map[profile.NodeID]string // Phase's answers
	pcAccesses map[profile.PCKey]uint64  // per (kernel, access kind), PC zero
	localPCs   map[InstKey]bool          // PCs touching local-memory pseudo objects
	siteMax    map[profile.NodeID]uint64 // siteSize's answers
}

// siteSize is the largest device allocation any pass made at allocation
// context ctx (0 if none).
func (x *Index) siteSize(ctx profile.NodeID) uint64 {
	if x.siteMax == nil {
		x.siteMax = map[profile.NodeID]uint64{}
		for _, o := range x.P.Objects {
			if o.Space == 0 && o.Size > x.siteMax[o.Context] {
				x.siteMax[o.Context] = o.Size
			}
		}
	}
	return x.siteMax[ctx]
}

// InstKey names an instruction within a kernel launch context.
type InstKey struct {
	Kernel profile.NodeID
	PC     profile.PC
}

// NewIndex indexes p.
func NewIndex(p *profile.Profile) *Index {
	x := &Index{
		P:          p,
		Children:   p.Children(),
		Inst:       map[InstKey]profile.NodeID{},
		PCOf:       map[profile.NodeID]profile.PC{},
		KernelTime: map[profile.NodeID]uint64{},
		inc:        p.Inclusive(),
	}
	for _, id := range p.SortedNodeIDs() {
		n := p.Nodes[id]
		switch n.Frame.Kind {
		case profile.KindKernel:
			x.Kernels = append(x.Kernels, id)
			t := x.inc[id].Get(profile.GPUTime)
			x.KernelTime[id] = t
			x.JobTime += t
		case profile.KindInstruction:
			fn := x.enclosing(id, profile.KindGPUFunction)
			k := p.KernelOf(id)
			if k == profile.RootID {
				continue
			}
			f := p.Nodes[fn]
			if f == nil {
				f = p.Nodes[k] // instructions directly under the kernel belong to its body
			}
			mod, err := parseModule(f.Frame.Module)
			if err != nil {
				if mod, err = parseModule(p.Nodes[k].Frame.Module); err != nil {
					continue
				}
			}
			pc := profile.PC{Func: profile.FuncIDOf(mod, f.Frame.Function), Offset: uint32(n.Frame.Offset)}
			x.Inst[InstKey{k, pc}] = id
			x.PCOf[id] = pc
		}
	}
	sort.SliceStable(x.Kernels, func(i, j int) bool {
		return x.KernelTime[x.Kernels[i]] > x.KernelTime[x.Kernels[j]]
	})
	return x
}

func parseModule(s string) (profile.ModuleHash, error) {
	if s == "" {
		return 0, fmt.Errorf("no module")
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return profile.ModuleHash(v), err
}

// Inclusive returns the node's inclusive values.
func (x *Index) Inclusive(id profile.NodeID) profile.Values { return x.inc[id] }

// enclosing returns the nearest ancestor-or-self of kind k below the kernel,
// or RootID.
func (x *Index) enclosing(id profile.NodeID, k profile.NodeKind) profile.NodeID {
	for id != profile.RootID {
		n := x.P.Nodes[id]
		if n == nil || n.Frame.Kind == profile.KindKernel {
			return profile.RootID
		}
		if n.Frame.Kind == k {
			return id
		}
		id = n.Parent
	}
	return profile.RootID
}

// Loop returns the innermost loop node enclosing id (RootID if none).
func (x *Index) Loop(id profile.NodeID) profile.NodeID { return x.enclosing(id, profile.KindLoop) }

// Loops returns the loop nodes enclosing id, innermost first.
func (x *Index) Loops(id profile.NodeID) []profile.NodeID {
	var out []profile.NodeID
	for l := x.Loop(id); l != profile.RootID; l = x.Loop(x.P.Nodes[l].Parent) {
		out = append(out, l)
	}
	return out
}

// Function returns the GPU function node enclosing id (RootID if none).
func (x *Index) Function(id profile.NodeID) profile.NodeID {
	return x.enclosing(id, profile.KindGPUFunction)
}

// Where describes node id (an instruction, line, loop or function node).
func (x *Index) Where(id profile.NodeID) Where {
	p := x.P
	w := Where{Context: id}
	if k := p.KernelOf(id); k != profile.RootID {
		w.Kernel = symname.Demangle(p.Nodes[k].Frame.Function)
	}
	if pc, ok := x.PCOf[id]; ok {
		pc := pc
		w.PC = &pc
	}
	// The innermost line and inlined frame give the source position; the
	// innermost GPU function the machine function.
	for cur := id; cur != profile.RootID; {
		n := p.Nodes[cur]
		if n == nil || n.Frame.Kind == profile.KindKernel {
			break
		}
		switch n.Frame.Kind {
		case profile.KindLine:
			if w.File == "" {
				w.File, w.Line = n.Frame.File, n.Frame.Line
			}
		case profile.KindLoop:
			if w.Loop == "" {
				w.Loop = loopPlace(n.Frame)
				if w.File == "" { // a loop node described by itself
					w.File, w.Line = n.Frame.File, n.Frame.Line
				}
			}
		case profile.KindInlined:
			if w.Function == "" && n.Frame.Function != "" {
				w.Function = symname.Demangle(n.Frame.Function)
			}
			// Code inlined from the toolkit's headers is shown at the
			// user's call site.
			if SystemFile(w.File) && n.Frame.File != "" {
				w.File, w.Line = n.Frame.File, n.Frame.Line
			}
		case profile.KindGPUFunction:
			if w.Function == "" {
				w.Function = symname.Demangle(n.Frame.Function)
			}
		}
		cur = n.Parent
	}
	if w.Function == "" {
		w.Function = w.Kernel
	}
	return w
}

// WhereObject describes a data object accessed in kernel context k.
func (x *Index) WhereObject(k profile.NodeID, o profile.ObjectID) Where {
	w := Where{Context: k, Object: &o}
	if n := x.P.Nodes[k]; n != nil {
		w.Kernel = symname.Demangle(n.Frame.Function)
		w.Function = w.Kernel
	}
	w.Alloc = x.AllocSite(o)
	return w
}

// AllocSite renders an object's allocation context, innermost frame first.
func (x *Index) AllocSite(o profile.ObjectID) string {
	obj := x.P.Objects[o]
	if obj == nil {
		return ""
	}
	var parts []string
	for cur := obj.Context; cur != profile.RootID && len(parts) < 4; {
		n := x.P.Nodes[cur]
		if n == nil {
			break
		}
		f := n.Frame
		s := symname.Short(f.Function)
		if s == "" && f.Module != "" {
			// A host frame not symbolised: its module and offset, as the
			// exports name it (an allocation in a stripped library read
			// "allocated at " and nothing).
			s = fmt.Sprintf("%s+%#x", path.Base(f.Module), f.Offset)
		}
		if f.File != "" {
			s += fmt.Sprintf(" %s:%d", f.File, f.Line)
		}
		parts = append(parts, s)
		cur = n.Parent
	}
	return strings.Join(parts, " <- ")
}

// NoLine is what a place without line information reads: the code is
// known at function level only.
const NoLine = "no line information"

// Place renders a source position, "file:line", or NoLine.
func Place(file string, line uint32) string {
	if file == "" {
		return NoLine
	}
	return fmt.Sprintf("%s:%d", file, line)
}

// at renders a position for a sentence: "at file:line", or "(no line
// information)".
func at(file string, line uint32) string {
	if file == "" {
		return "(" + NoLine + ")"
	}
	return "at " + Place(file, line)
}

// loopPlace names a loop node: its header's "file:line", or its header's
// offset when the code has no line information.
func loopPlace(f profile.Frame) string {
	if f.File == "" {
		return fmt.Sprintf("+%#x (%s)", f.Offset, NoLine)
	}
	return Place(f.File, f.Line)
}

// SystemFile reports whether a source file belongs to the CUDA toolkit or
// the system (headers whose lines mean little to the user).
func SystemFile(f string) bool {
	return strings.HasPrefix(f, "/usr/") || strings.Contains(f, "/cuda/") || strings.Contains(f, "/targets/") ||
		strings.Contains(f, "/crt/") || strings.HasSuffix(f, "_functions.hpp") || strings.HasSuffix(f, "_functions.h")
}

// KernelShare is kernel context k's share of the job's GPU time.
func (x *Index) KernelShare(k profile.NodeID) float64 {
	if x.JobTime == 0 {
		return 0
	}
	return float64(x.KernelTime[k]) / float64(x.JobTime)
}

// Subtree calls f on id and every descendant.
func (x *Index) Subtree(id profile.NodeID, f func(profile.NodeID)) {
	f(id)
	for _, c := range x.Children[id] {
		x.Subtree(c, f)
	}
}

// InstNodes returns the instruction nodes of kernel context k in PC order.
func (x *Index) InstNodes(k profile.NodeID) []profile.NodeID {
	var out []profile.NodeID
	x.Subtree(k, func(id profile.NodeID) {
		if _, ok := x.PCOf[id]; ok {
			out = append(out, id)
		}
	})
	sort.Slice(out, func(i, j int) bool {
		a, b := x.PCOf[out[i]], x.PCOf[out[j]]
		if a.Func != b.Func {
			return a.Func < b.Func
		}
		return a.Offset < b.Offset
	})
	return out
}
