package analysis

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/sass"
)

// sassText writes nvdisasm -c -g -hex style text for one kernel from a
// listing of instructions, one per line:
//
//	INSTRUCTION [{W0 R1 B01 S4 Y}]
//
// "#line N" sets the source line (k.cu) of the instructions that follow,
// ".L_x:" lines are labels. The braces give the control bits: write and
// read scoreboards, the wait mask, stall cycles and the yield bit, encoded
// in the high word as Volta+ GPUs do.
func sassText(name, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\t.target\tsm_90\n\n//--------------------- .text.%s --------------------------\n", name)
	fmt.Fprintf(&b, "\t.section\t.text.%s,\"ax\",@progbits\n\t.global\t%s\n\t.type\t%s,@function\n\t.other\t%s,@\"STO_CUDA_ENTRY STV_DEFAULT\"\n%s:\n.text.%s:\n", name, name, name, name, name, name)
	off := 0
	for _, raw := range strings.Split(body, "\n") {
		s := strings.TrimSpace(raw)
		switch {
		case s == "":
			continue
		case strings.HasPrefix(s, "#line "):
			fmt.Fprintf(&b, "\t//## File \"k.cu\", line %s\n", strings.TrimPrefix(s, "#line "))
			continue
		case strings.HasSuffix(s, ":"), strings.HasPrefix(s, ".type"):
			fmt.Fprintf(&b, "%s\n", s) // labels, and a subroutine's .type line
			continue
		}
		ctl := ""
		if i := strings.Index(s, "{"); i >= 0 {
			ctl = strings.Trim(s[i:], "{} ")
			s = strings.TrimSpace(s[:i])
		}
		hi := controlWord(ctl)
		fmt.Fprintf(&b, "        /*%04x*/                   %s ;    /* 0x%016x */\n", off, strings.TrimSuffix(s, " ;"), uint64(0x7b82+off))
		fmt.Fprintf(&b, "                                                  /* 0x%016x */\n", hi)
		off += 16
	}
	return b.String()
}

func controlWord(ctl string) uint64 {
	wb, rb, wait, stall, yield := uint64(7), uint64(7), uint64(0), uint64(1), uint64(0)
	for _, c := range strings.Fields(ctl) {
		v := c[1:]
		switch c[0] {
		case 'W':
			n, _ := strconv.Atoi(v)
			wb = uint64(n)
		case 'R':
			n, _ := strconv.Atoi(v)
			rb = uint64(n)
		case 'B':
			for _, d := range v {
				wait |= 1 << uint(d-'0')
			}
		case 'S':
			n, _ := strconv.Atoi(v)
			stall = uint64(n)
		case 'Y':
			yield = 1
		}
	}
	return stall<<41 | yield<<45 | wb<<46 | rb<<49 | wait<<52
}

func parseSASS(t *testing.T, name, body string) *sass.Module {
	t.Helper()
	m, err := sass.Parse([]byte(sassText(name, body)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sampledKernel builds a profile of one kernel context whose instruction
// nodes mirror the SASS of m's kernel (lines and loops from the structure
// tree), and returns it with a setter for per-instruction metrics.
type sampled struct {
	p    *profile.Profile
	k    *profile.Node
	mod  profile.ModuleHash
	node map[uint64]profile.NodeID // instruction offset -> node
}

func sampledKernel(t *testing.T, m *sass.Module, name string, mod profile.ModuleHash) *sampled {
	t.Helper()
	s := sampledKernelIn(t, profile.New("j"), m, name, mod)
	s.p.Add(s.k.ID, profile.GPUTime, 1000)
	return s
}

// sampledKernelIn adds the kernel context to p.
func sampledKernelIn(t *testing.T, p *profile.Profile, m *sass.Module, name string, mod profile.ModuleHash) *sampled {
	t.Helper()
	return sampledKernelAt(t, p, m, name, mod, profile.Frame{Kind: profile.KindHostFrame, Module: "/app", Function: "main", File: "main.cu", Line: 10 + uint32(len(p.Nodes))})
}

// sampledKernelAt adds the kernel context to p, launched from the host
// frames given (outermost first).
func sampledKernelAt(t *testing.T, p *profile.Profile, m *sass.Module, name string, mod profile.ModuleHash, host ...profile.Frame) *sampled {
	t.Helper()
	p.AddModule(profile.Module{Hash: mod, Name: "k.cubin", SM: 90})
	h := p.Path(host...)
	k := p.Child(h.ID, profile.Frame{Kind: profile.KindKernel, Module: mod.String(), Function: name})
	fn := p.Child(k.ID, profile.Frame{Kind: profile.KindGPUFunction, Module: mod.String(), Function: name})
	p.AddFunc(mod, name)
	s := &sampled{p: p, k: k, mod: mod, node: map[uint64]profile.NodeID{}}
	f := m.Func(name)
	g := f.CFG()
	for i := range f.Insts {
		parent := fn.ID
		for _, li := range g.LoopNest(g.BlockOf(i)) {
			lp := g.Loops[li]
			loc := m.Location(lp.Loc)
			parent = p.Child(parent, profile.Frame{Kind: profile.KindLoop, File: m.File(loc.File), Line: uint32(loc.Line), Offset: f.Insts[g.Blocks[lp.Header].Start].Offset}).ID
		}
		loc := m.Location(f.Insts[i].Loc)
		ln := p.Child(parent, profile.Frame{Kind: profile.KindLine, File: m.File(loc.File), Line: uint32(loc.Line)})
		in := p.Child(ln.ID, profile.Frame{Kind: profile.KindInstruction, Offset: f.Insts[i].Offset})
		s.node[f.Insts[i].Offset] = in.ID
	}
	return s
}

// launches records n launches of the kernel, each of grid blocks of
// threads threads using regs registers per thread.
func (s *sampled) launches(n, threads, grid, regs uint64) {
	for _, mv := range []profile.MV{{ID: profile.GPULaunches, V: n}, {ID: profile.LaunchBlockThreads, V: n * threads},
		{ID: profile.LaunchGridBlocks, V: n * grid}, {ID: profile.LaunchWithAttrs, V: n}, {ID: profile.LaunchRegs, V: n * regs}} {
		s.p.Add(s.k.ID, mv.ID, mv.V)
	}
}

// advise runs Advise over the sampled kernel's profile and module m.
func (s *sampled) advise(t *testing.T, m *sass.Module, o Options) []Advice {
	t.Helper()
	as, err := Advise(s.p, Modules{mod1: m}, o)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// stall adds samples of reason at the instruction at offset off.
func (s *sampled) stall(off uint64, reason string, n uint64) {
	s.p.Add(s.node[off], profile.StallMetric(reason), n)
}
