package profile_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

func TestBatchRoundTrip(t *testing.T) {
	it := proftest.Item("job7", 3, proftest.Small, 5, 2, false, 0)
	chunks, err := profile.EncodeBatch(it, false, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 {
		t.Fatalf("%d chunks for a small item", len(chunks))
	}
	got, h, err := profile.DecodeBatch(chunks[0])
	if err != nil {
		t.Fatal(err)
	}
	if h.Rank != 5 || h.Seq != 2 || h.Job != "job7" || h.Flags&profile.FlagSynthetic == 0 {
		t.Fatalf("header %+v", h)
	}
	if !bytes.Equal(got.Encode(), it.Encode()) {
		t.Fatal("batch round trip changed the item")
	}
}

func TestBatchChunking(t *testing.T) {
	it := proftest.Item("job7", 3, proftest.Realistic, 1, 0, false, 0)
	chunks, err := profile.EncodeBatch(it, false, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 3 {
		t.Fatalf("only %d chunks", len(chunks))
	}
	for i, c := range chunks {
		if len(c) > 4096 {
			t.Fatalf("chunk %d has %d bytes > 4096", i, len(c))
		}
	}
	// Chunks arrive in any order, some twice.
	rng := rand.New(rand.NewPCG(1, 2))
	order := append(append([][]byte(nil), chunks...), chunks[0], chunks[len(chunks)/2])
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var a profile.Assembler
	var got *profile.Profile
	for _, c := range order {
		p, _, err := a.Add(c)
		if errors.Is(err, profile.ErrIncomplete) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got == nil {
			got = p
		}
	}
	if got == nil || !bytes.Equal(got.Encode(), it.Encode()) {
		t.Fatal("chunked item not reassembled")
	}
}

func TestBatchErrorsNameRankSeqOffset(t *testing.T) {
	it := proftest.Item("job7", 3, proftest.Small, 9, 4, false, 0)
	chunks, _ := profile.EncodeBatch(it, false, 1<<20)
	msg := chunks[0]
	cases := map[string][]byte{
		"checksum":  append(append([]byte(nil), msg[:len(msg)-1]...), msg[len(msg)-1]^0xff),
		"body has":  msg[:len(msg)-10],
		"bad magic": append([]byte("XXXX"), msg[4:]...),
		"shorter":   msg[:10],
	}
	for want, b := range cases {
		_, _, err := profile.DecodeBatch(b)
		var be *profile.BatchError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v", want, err)
			continue
		}
		if want != "bad magic" && want != "shorter" && (be.Rank != 9 || be.Seq != 4) {
			t.Errorf("%s: error names rank %d seq %d", want, be.Rank, be.Seq)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	it := proftest.Item("job7", 3, proftest.Small, 1, 0, false, 0)
	chunks, _ := profile.EncodeBatch(it, false, 1<<20)
	f.Add(chunks[0])
	small, _ := profile.EncodeBatch(it, true, 700)
	f.Add(small[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		p, _, err := profile.DecodeBatch(b)
		if err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("decoded batch fails validation: %v", err)
			}
		}
	})
}

func BenchmarkBatchEncode(b *testing.B) {
	it := proftest.Item("bench", 1, proftest.Realistic, 3, 0, false, 0)
	raw := len(it.Encode())
	b.SetBytes(int64(raw))
	var comp int
	for b.Loop() {
		chunks, err := profile.EncodeBatch(it, false, 8<<20)
		if err != nil {
			b.Fatal(err)
		}
		comp = 0
		for _, c := range chunks {
			comp += len(c)
		}
	}
	b.ReportMetric(float64(raw)/float64(comp), "ratio")
	b.ReportMetric(float64(raw), "raw-bytes")
}

func BenchmarkBatchDecode(b *testing.B) {
	it := proftest.Item("bench", 1, proftest.Realistic, 3, 0, false, 0)
	raw := len(it.Encode())
	chunks, _ := profile.EncodeBatch(it, false, 64<<20)
	b.SetBytes(int64(raw))
	for b.Loop() {
		if _, _, err := profile.DecodeBatch(chunks[0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMerge64 merges 64 complete realistic ranks (one data item and
// the done item each), the root's work in a flat merge.
func BenchmarkMerge64(b *testing.B) {
	var items []*profile.Profile
	for r := int32(0); r < 64; r++ {
		items = append(items, proftest.Rank("bench", 1, proftest.Realistic, r, 1)...)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak uint64
	for b.Loop() {
		p := profile.New("bench")
		for _, it := range items {
			if err := p.Merge(it); err != nil {
				b.Fatal(err)
			}
		}
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc-base)
	}
	b.ReportMetric(float64(peak)/(1<<20), "heap-MB")
}
