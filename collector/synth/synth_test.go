package synth

import (
	"bytes"
	"io"
	"testing"

	"gpuprof/collector/rawstream"
)

// frames decodes a stream.
func frames(t *testing.T, b []byte) []rawstream.Frame {
	t.Helper()
	d := rawstream.NewDecoder(bytes.NewReader(b))
	var out []rawstream.Frame
	for {
		f, err := d.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
}

// decode decodes a stream's frames by kind.
func decode(t *testing.T, b []byte) map[rawstream.Kind][]rawstream.Frame {
	t.Helper()
	out := map[rawstream.Kind][]rawstream.Frame{}
	for _, f := range frames(t, b) {
		out[f.Kind()] = append(out[f.Kind()], f)
	}
	return out
}

func write(t *testing.T, rank int, o Options) []byte {
	var buf bytes.Buffer
	st, err := WriteRank(&buf, rank, o)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != int64(buf.Len()) {
		t.Errorf("stats say %d bytes, wrote %d", st.Bytes, buf.Len())
	}
	return buf.Bytes()
}

func TestDeterministicBySeed(t *testing.T) {
	o := Options{Seed: 9}
	a, b := write(t, 2, o), write(t, 2, o)
	if !bytes.Equal(a, b) {
		t.Fatal("two streams of the same seed and rank differ")
	}
	if bytes.Equal(a, write(t, 3, o)) || bytes.Equal(a, write(t, 2, Options{Seed: 10})) {
		t.Fatal("another rank or seed gives the same stream")
	}
}

func TestEveryModeDecodes(t *testing.T) {
	want := map[rawstream.Mode]rawstream.Kind{
		rawstream.ModeRedundancy: rawstream.KindAccess,
		rawstream.ModePCSampling: rawstream.KindPCSamples,
		rawstream.ModeHybrid:     rawstream.KindInstrCounts,
	}
	for mode, kind := range want {
		fs := decode(t, write(t, 1, Options{Mode: mode}))
		h := fs[rawstream.KindHello][0].(*rawstream.Hello)
		if h.Flags&rawstream.HelloSynthetic == 0 || h.Mode != mode || h.Rank != 1 {
			t.Errorf("%v: hello %+v", mode, h)
		}
		if len(fs[kind]) == 0 || len(fs[rawstream.KindEnd]) != 1 || len(fs[rawstream.KindHostModule]) == 0 || len(fs[rawstream.KindAlloc]) == 0 {
			t.Errorf("%v: frames %v", mode, len(fs))
		}
		if mode == rawstream.ModePCSampling && len(fs[rawstream.KindStallReasons]) != 1 {
			t.Errorf("pcsampling without a stall reason table")
		}
	}
}

func TestImbalanceAndSampling(t *testing.T) {
	o := Options{Imbalance: 1, Iterations: 4, KernelSampling: 2, BlockSampling: 4}
	launches := func(rank int) (n, traced int, blocks, sampled uint64) {
		fs := decode(t, write(t, rank, o))
		for _, f := range fs[rawstream.KindLaunch] {
			n++
			if f.(*rawstream.Launch).Instrumented {
				traced++
			}
		}
		for _, f := range fs[rawstream.KindKernelEnd] {
			ke := f.(*rawstream.KernelEnd)
			blocks += uint64(ke.BlocksTotal)
			sampled += uint64(ke.BlocksSampled)
		}
		return
	}
	n0, t0, b0, s0 := launches(0)
	n1, t1, b1, s1 := launches(1)
	// Per iteration: reload twice or three times, fill, vec4; then shm once.
	if n1 != 4*3+2+1 || n0 != 8*3+4+1 {
		t.Errorf("launches: rank 0 %d, rank 1 %d", n0, n1)
	}
	if t0 <= t1 || t1 < n1/2 || b0 <= b1 {
		t.Errorf("traced launches %d/%d, blocks %d/%d", t0, t1, b0, b1)
	}
	if s1 == 0 || s1*3 > b1 {
		t.Errorf("rank 1: %d of %d blocks sampled with P=4", s1, b1)
	}
	_ = s0
}

// Every rank loads the same module bytes, so every rank agrees on its
// content hash.
func TestSameModuleOnEveryRank(t *testing.T) {
	m0 := decode(t, write(t, 0, Options{}))[rawstream.KindModule][0].(*rawstream.Module)
	m5 := decode(t, write(t, 5, Options{}))[rawstream.KindModule][0].(*rawstream.Module)
	if !bytes.Equal(m0.Bytes, m5.Bytes) || m0.ContentKey != fnv1a(m0.Bytes) {
		t.Error("module bytes differ between ranks, or the content key is not FNV-1a of them")
	}
}

func TestParsePattern(t *testing.T) {
	for p := PatternDefault; p <= PatternIndex; p++ {
		q, err := ParsePattern(p.String())
		if err != nil || q != p {
			t.Errorf("%v: %v %v", p, q, err)
		}
	}
	if _, err := ParsePattern("zipf"); err == nil {
		t.Error("unknown pattern accepted")
	}
}

// Four ranks on two GPUs of one host in PC sampling: ranks 0 and 1 sample
// their GPUs (0 and 1), ranks 2 and 3 share them, say so in HELLO and
// carry kernel times but no PC samples; the heavy ranks launch more.
func TestMultiGPUStreams(t *testing.T) {
	o := Options{Ranks: 4, Seed: 3, Mode: rawstream.ModePCSampling, KernelSampling: 1, GPUs: 2, Heavy: []int{1, 2}, Imbalance: 1}
	var launches [4]int
	uuids := map[int32]string{}
	for r := 0; r < 4; r++ {
		fs := decode(t, write(t, r, o))
		h := fs[rawstream.KindHello][0].(*rawstream.Hello)
		elsewhere := h.Flags&rawstream.HelloPCSElsewhere != 0
		if h.Device != int32(r%2) || h.Host != "synth00" || elsewhere != (r >= 2) {
			t.Errorf("rank %d: device %d host %s flags %#x", r, h.Device, h.Host, h.Flags)
		}
		if u, ok := uuids[h.Device]; ok && u != h.GPUUUID {
			t.Errorf("rank %d: GPU %d has UUID %s, another rank saw %s", r, h.Device, h.GPUUUID, u)
		}
		uuids[h.Device] = h.GPUUUID
		if n := len(fs[rawstream.KindPCSamples]); (n == 0) != elsewhere || (len(fs[rawstream.KindStallReasons]) == 0) != elsewhere {
			t.Errorf("rank %d: %d PC_SAMPLES frames, PC-sampled elsewhere %v", r, n, elsewhere)
		}
		if len(fs[rawstream.KindKernelEnd]) == 0 {
			t.Errorf("rank %d: no kernel times", r)
		}
		launches[r] = len(fs[rawstream.KindLaunch])
	}
	if uuids[0] == uuids[1] || launches[1] <= launches[0] || launches[2] != launches[1] || launches[3] != launches[0] {
		t.Errorf("UUIDs %v, launches %v: want two GPUs and ranks 1 and 2 heavy", uuids, launches)
	}
}
