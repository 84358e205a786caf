package profile_test

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

var (
	leafOnce  sync.Once
	leafState *profile.Profile
)

// leaf8 is a leaf's state after 8 complete realistic ranks: the partial a
// reducer leaf encodes at the end of a job (~15 MB encoded).
func leaf8(b *testing.B) *profile.Profile {
	leafOnce.Do(func() {
		p := profile.New("bench")
		for r := int32(0); r < 8; r++ {
			for _, it := range proftest.Rank("bench", 1, proftest.Realistic, r, 1) {
				if err := p.Merge(it); err != nil {
					panic(err)
				}
			}
		}
		leafState = p
	})
	return leafState
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs f b.N times and reports CPU ms per op beside the wall time:
// the work done, which a loaded machine disturbs less than the wall time.
func loop(b *testing.B, f func()) {
	c0 := cpuTime()
	for b.Loop() {
		f()
	}
	b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// BenchmarkEncode encodes a leaf state of 8 realistic ranks (MB/s of
// canonical encoding).
func BenchmarkEncode(b *testing.B) {
	p := leaf8(b)
	b.SetBytes(int64(len(p.Encode())))
	loop(b, func() { p.Encode() })
}

// BenchmarkDecode decodes the same encoding.
func BenchmarkDecode(b *testing.B) {
	raw := leaf8(b).Encode()
	b.SetBytes(int64(len(raw)))
	loop(b, func() {
		if _, err := profile.Decode(raw); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkEncodeReference is the sequential encoder this package had
// before (encode_ref_test.go), on the same state, for comparison.
func BenchmarkEncodeReference(b *testing.B) {
	p := leaf8(b)
	b.SetBytes(int64(len(p.Encode())))
	loop(b, func() { refEncode(p) })
}
