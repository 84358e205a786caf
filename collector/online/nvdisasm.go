package online

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"gpuprof/profile"
	"gpuprof/sass"
)

type modWork struct {
	hash    profile.ModuleHash
	cubin   []byte
	queue   []*fnJob
	running bool

	symOnce sync.Once
	syms    map[string]int // function name -> ELF symbol index
	symErr  error
	path    string            // the cubin written for nvdisasm ("" not yet)
	whole   map[string][]byte // after a failed selection: every function's listing, compressed
}

type fnJob struct {
	fn   string
	done chan struct{}
	text []byte
	why  string
}

func (s *SASS) parallel() int {
	if s.Parallel > 0 {
		return s.Parallel
	}
	return max(1, min(4, runtime.NumCPU()/2))
}

// disassemble returns the listing of function fn (and the functions it
// calls), made by nvdisasm with the functions of the module that wait
// with it; why says why there is none.
func (s *SASS) disassemble(mod ModuleRef, fn, tool string) ([]byte, string) {
	j := &fnJob{fn: fn, done: make(chan struct{})}
	s.mu.Lock()
	if s.mods == nil {
		s.mods = map[profile.ModuleHash]*modWork{}
		s.sem = make(chan struct{}, s.parallel())
	}
	mw := s.mods[mod.Hash]
	if mw == nil {
		mw = &modWork{hash: mod.Hash, cubin: mod.Cubin}
		s.mods[mod.Hash] = mw
	}
	mw.queue = append(mw.queue, j)
	if !mw.running {
		mw.running = true
		go s.drain(mw, tool)
	}
	s.mu.Unlock()
	<-j.done
	return j.text, j.why
}

// drain runs the module's waiting functions in batches, one nvdisasm run
// each, within the bound on runs at once.
func (s *SASS) drain(mw *modWork, tool string) {
	for {
		s.sem <- struct{}{}
		// Functions first launched together (a framework's step launches
		// a few dozen kernels at once) go in one run.
		time.Sleep(gatherDelay)
		s.mu.Lock()
		jobs := mw.queue
		mw.queue = nil
		if len(jobs) == 0 {
			mw.running = false
			s.mu.Unlock()
			<-s.sem
			return
		}
		s.mu.Unlock()
		func() {
			defer func() {
				if r := recover(); r != nil {
					for _, j := range jobs {
						if j.text == nil && j.why == "" {
							j.why = fmt.Sprintf("%s: %v", WhyNVDisasm, r)
						}
					}
				}
				<-s.sem
				for _, j := range jobs {
					close(j.done)
				}
			}()
			s.batch(mw, jobs, tool)
		}()
	}
}

// gatherDelay is how long a module's next nvdisasm run waits for more
// functions to join it: small beside a run, which reads the whole cubin.
const gatherDelay = 20 * time.Millisecond

// maxCalleeRounds bounds the runs that add the sections of called
// functions a selection lacked.
const maxCalleeRounds = 3

// batch disassembles the functions of jobs in one nvdisasm run (more if
// they call functions of other sections) and cuts each one's listing.
// wholeModuleLimit: above it, a module is disassembled whole only when a
// selection missed functions, not when nvdisasm failed on them.
const wholeModuleLimit = 16 << 20

func (s *SASS) batch(mw *modWork, jobs []*fnJob, tool string) {
	mw.symOnce.Do(mw.readSymbols)
	if mw.symErr != nil {
		for _, j := range jobs {
			j.why = fmt.Sprintf("%s: module %v: %v", WhyNVDisasm, mw.hash, mw.symErr)
		}
		return
	}
	var want []*fnJob
	for _, j := range jobs {
		if enc, ok := mw.whole[j.fn]; ok {
			j.text, _ = sass.DecodeListing(enc)
			continue
		}
		if _, ok := mw.syms[j.fn]; !ok {
			j.why = fmt.Sprintf("%s: %s is not a function symbol of module %v", WhyNotInModule, j.fn, mw.hash)
			continue
		}
		want = append(want, j)
	}
	if len(want) == 0 {
		return
	}
	path, err := s.cubinFile(mw)
	if err != nil {
		for _, j := range want {
			j.why = WhyNVDisasm + ": " + err.Error()
		}
		return
	}
	text, m, asked, err := s.selection(mw, want, path, tool)
	var absent []string
	if err == nil {
		for _, j := range want {
			if m.Func(j.fn) == nil {
				absent = append(absent, j.fn)
			}
		}
	}
	if err != nil && len(mw.cubin) > wholeModuleLimit {
		// nvdisasm itself failed on these functions (it does on some of
		// cuBLASLt's sm_90 kernels): the whole of a framework-sized module
		// would take long and most likely fail the same way.
		for _, j := range want {
			j.why = WhyNVDisasm + ": " + firstLine(err.Error())
		}
		return
	}
	if err != nil || len(absent) > 0 {
		why := fmt.Sprintf("the selection of %d functions lacked %d (such as %s)", asked, len(absent), firstOf(absent))
		if err != nil {
			why = firstLine(err.Error())
		}
		if text, m, err = s.wholeModule(mw, path, tool, why); err != nil {
			for _, j := range want {
				j.why = WhyNVDisasm + ": " + firstLine(err.Error())
			}
			return
		}
	}
	for _, j := range want {
		piece, ok := sass.FunctionListing(text, m, j.fn)
		if !ok {
			j.why = fmt.Sprintf("%s: nvdisasm's listing of module %v lacks %s", WhyNotInModule, mw.hash, j.fn)
			continue
		}
		j.text = piece
		s.count(func(st *ShareStats) { st.Functions++ })
	}
}

// readSymbols maps the module's function names to their ELF symbol
// indices, which nvdisasm's function selection takes (once per module).
func (mw *modWork) readSymbols() {
	c, err := sass.ParseCubin(mw.cubin)
	if err != nil {
		mw.symErr = err
		return
	}
	mw.syms = make(map[string]int, len(c.Functions))
	for _, f := range c.Functions {
		if _, dup := mw.syms[f.Name]; !dup {
			mw.syms[f.Name] = f.Symbol
		}
	}
}

// selection runs nvdisasm on the sections of the functions of want, then
// again with the sections of the functions they call that the listing
// lacked (at most maxCalleeRounds more runs). It returns the last listing,
// parsed, and how many functions it asked for.
func (s *SASS) selection(mw *modWork, want []*fnJob, path, tool string) ([]byte, *sass.Module, int, error) {
	asked := map[int]bool{}
	var idx []int
	add := func(name string) bool {
		i, ok := mw.syms[name]
		if !ok || asked[i] {
			return false
		}
		asked[i] = true
		idx = append(idx, i)
		return true
	}
	for _, j := range want {
		add(j.fn)
	}
	var text []byte
	var m *sass.Module
	var err error
	for round := 0; ; round++ {
		sort.Ints(idx)
		list := make([]string, len(idx))
		for i, v := range idx {
			list[i] = fmt.Sprint(v)
		}
		s.count(func(st *ShareStats) { st.Disassembled++ })
		text, err = sass.RunNVDisasmFile(tool, path, s.timeout(), "-fun", strings.Join(list, ","))
		if err == nil {
			m, err = sass.Parse(text)
		}
		if err != nil || round == maxCalleeRounds {
			break
		}
		more := false
		for _, j := range want {
			if m.Func(j.fn) == nil {
				continue
			}
			_, missing := sass.FunctionSections(m, j.fn)
			for _, c := range missing {
				more = add(c) || more
			}
		}
		if !more {
			break
		}
	}
	return text, m, len(idx), err
}

// wholeModule disassembles the whole module after a selection failed (an
// nvdisasm without -fun, or one that counts symbols otherwise; why says
// how), once: each of its functions' listings is kept for later requests.
func (s *SASS) wholeModule(mw *modWork, path, tool, why string) ([]byte, *sass.Module, error) {
	s.logf("module %v: nvdisasm %s; disassembling the whole module (%d bytes)", mw.hash, why, len(mw.cubin))
	s.count(func(st *ShareStats) { st.Disassembled++; st.Whole++ })
	text, err := sass.RunNVDisasmFile(tool, path, s.timeout())
	if err != nil {
		return nil, nil, err
	}
	m, err := sass.Parse(text)
	if err != nil {
		return nil, nil, err
	}
	mw.whole = map[string][]byte{}
	for _, f := range m.Functions {
		if piece, ok := sass.FunctionListing(text, m, f.Name); ok {
			mw.whole[f.Name] = sass.EncodeListing(piece)
		}
	}
	return text, m, nil
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// cubinFile writes the module's cubin for nvdisasm, once per module (the
// module's batches run one at a time).
func (s *SASS) cubinFile(mw *modWork) (string, error) {
	s.mu.Lock()
	if mw.path != "" {
		defer s.mu.Unlock()
		return mw.path, nil
	}
	if s.tmp == "" {
		dir, err := os.MkdirTemp("", "gpuprof-cubins-")
		if err != nil {
			s.mu.Unlock()
			return "", err
		}
		s.tmp = dir
	}
	p := filepath.Join(s.tmp, mw.hash.String()+".cubin")
	s.mu.Unlock()
	if err := os.WriteFile(p, mw.cubin, 0o600); err != nil {
		return "", err
	}
	s.mu.Lock()
	mw.path = p
	s.mu.Unlock()
	return p, nil
}
