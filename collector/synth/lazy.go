package synth

import (
	"bytes"
	"io"

	"gpuprof/collector/rawstream"
)

// LazyLoading rewrites a stream as the injection library writes it under
// lazy module loading (CUDA 13's default): a module and its functions are
// reported only when one of its functions is first launched, and that
// kernel goes out just before, as a FUNCTION with module id 0 (a new
// function id) that its first LAUNCH names. Modules never launched are
// reported before END.
//
// The module comes right after that LAUNCH, as in the captures of the
// GPU machine; with late, only after the launch's last frame (its
// records, KERNEL_END, PC samples and counts, which then name the
// orphan), or before a frame that needs one of its functions.
func LazyLoading(stream []byte, late bool) ([]byte, error) {
	var frames []rawstream.Frame
	d := rawstream.NewDecoder(bytes.NewReader(stream))
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		frames = append(frames, f)
	}
	var out bytes.Buffer
	w := rawstream.NewWriter(&out)
	for _, f := range lazyFrames(frames, late) {
		if err := w.Write(f); err != nil {
			return nil, err
		}
	}
	return out.Bytes(), nil
}

func lazyFrames(frames []rawstream.Frame, late bool) []rawstream.Frame {
	maxID := uint32(0)
	for _, f := range frames {
		if fn, ok := f.(*rawstream.Function); ok {
			maxID = max(maxID, fn.FunctionID)
		}
	}
	l := lazy{orphanBase: maxID + 1, late: late,
		mods: map[uint64]*lazyModule{}, funcMod: map[uint32]*lazyModule{}, funcs: map[uint32]*rawstream.Function{}}
	for _, f := range frames {
		l.frame(f)
	}
	return l.out
}

type lazyModule struct {
	frames []rawstream.Frame // MODULE, then its FUNCTIONs
	loaded bool
}

type lazy struct {
	orphanBase uint32
	late       bool
	mods       map[uint64]*lazyModule
	funcMod    map[uint32]*lazyModule
	funcs      map[uint32]*rawstream.Function
	// pending: the module reported late, after the frames of launch
	// pendingLaunch, whose function fn is orphan id orphan.
	pending       *lazyModule
	pendingLaunch uint64
	fn, orphan    uint32
	out           []rawstream.Frame
}

func (l *lazy) frame(f rawstream.Frame) {
	switch f := f.(type) {
	case *rawstream.Module:
		m := &lazyModule{frames: []rawstream.Frame{f}}
		l.mods[f.ModuleID] = m
		return
	case *rawstream.Function:
		if m := l.mods[f.ModuleID]; m != nil && !m.loaded {
			m.frames = append(m.frames, f)
			l.funcMod[f.FunctionID] = m
			l.funcs[f.FunctionID] = f
			return
		}
	case *rawstream.Launch:
		m := l.funcMod[f.FunctionID]
		if m == nil || m.loaded {
			break
		}
		l.flush()
		fn := l.funcs[f.FunctionID]
		orphan := l.orphanBase + fn.FunctionID
		l.out = append(l.out, &rawstream.Function{FunctionID: orphan, PC: fn.PC, Size: fn.Size, Name: fn.Name})
		c := *f
		c.FunctionID = orphan
		l.out = append(l.out, &c)
		m.loaded = true
		if !l.late {
			l.out = append(l.out, m.frames...)
			return
		}
		l.pending, l.pendingLaunch, l.fn, l.orphan = m, f.LaunchID, f.FunctionID, orphan
		return
	case *rawstream.End:
		l.flush()
		for _, m := range l.mods {
			if !m.loaded {
				m.loaded = true
				l.out = append(l.out, m.frames...)
			}
		}
	}
	if l.pending != nil {
		f = l.orphanFrame(f)
	}
	l.out = append(l.out, f)
}

// orphanFrame passes a frame while a module is pending: the pending
// launch's own frames name the orphan; any other frame ends the wait.
func (l *lazy) orphanFrame(f rawstream.Frame) rawstream.Frame {
	switch f := f.(type) {
	case *rawstream.Access:
		if f.LaunchID == l.pendingLaunch {
			return f
		}
	case *rawstream.KernelEnd:
		if f.LaunchID == l.pendingLaunch {
			return f
		}
	case *rawstream.PCSamples:
		if f.LaunchID == l.pendingLaunch {
			c := *f
			c.PCs = append([]rawstream.PCSample(nil), f.PCs...)
			for i := range c.PCs {
				if c.PCs[i].FunctionID == l.fn {
					c.PCs[i].FunctionID = l.orphan
				}
			}
			return &c
		}
	case *rawstream.InstrCounts:
		if f.LaunchID == l.pendingLaunch {
			c := *f
			c.Counts = append([]rawstream.InstrCount(nil), f.Counts...)
			for i := range c.Counts {
				if c.Counts[i].FunctionID == l.fn {
					c.Counts[i].FunctionID = l.orphan
				}
			}
			return &c
		}
	}
	l.flush()
	return f
}

func (l *lazy) flush() {
	if l.pending != nil {
		l.out = append(l.out, l.pending.frames...)
		l.pending = nil
	}
}
