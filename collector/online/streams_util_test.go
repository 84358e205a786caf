package online

import (
	"bytes"
	"testing"

	"gpuprof/collector/rawstream"
)

// testStream writes a generated stream: HELLO in redundancy mode with
// block sampling p (kernel sampling 1), one module (a stand-in cubin)
// and a function of it at 0x10000 named name.
type testStream struct {
	tb  testing.TB
	buf bytes.Buffer
	w   *rawstream.Writer
}

func newTestStream(tb testing.TB, p uint32, name string) *testStream {
	s := &testStream{tb: tb}
	s.w = rawstream.NewWriter(&s.buf)
	s.put(&rawstream.Hello{Version: 1, Mode: rawstream.ModeRedundancy, BlockSampling: p, KernelSampling: 1})
	cubin := []byte("\x7fELF-not-really-a-cubin")
	s.put(&rawstream.Module{ModuleID: 1, ContentKey: fnv(cubin), Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin})
	s.put(&rawstream.Function{FunctionID: 1, ModuleID: 1, PC: 0x10000, Size: 0x400, Name: name})
	return s
}

func (s *testStream) put(f rawstream.Frame) {
	if err := s.w.Write(f); err != nil {
		s.tb.Fatal(err)
	}
}

// end writes END and returns the stream.
func (s *testStream) end() []byte {
	s.put(&rawstream.End{})
	return s.buf.Bytes()
}
