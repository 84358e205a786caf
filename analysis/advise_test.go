package analysis

import (
	"reflect"
	"testing"
	"time"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

func mergedJob(t testing.TB, s proftest.Shape, ranks int32) *profile.Profile {
	p := profile.New("job1")
	for r := int32(0); r < ranks; r++ {
		for _, it := range proftest.Rank("job1", 7, s, r, 2) {
			if err := p.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// Advise on generated profiles: no SASS, so only the profile-only analyses
// run; the result must not depend on map order.
func TestAdviseDeterministic(t *testing.T) {
	p := mergedJob(t, proftest.Small, 4)
	a, err := Advise(p, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		b, err := Advise(p, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatal("two runs of Advise differ")
		}
	}
	if len(a) == 0 {
		t.Fatal("no advice on a profile with redundancy and rank-specific kernels")
	}
}

func TestAdviseRealisticScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test")
	}
	p := mergedJob(t, proftest.Realistic, 3)
	start := time.Now()
	as, err := Advise(p, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("%d nodes, %d temporal pairs, %d PCs: %d advice in %v", len(p.Nodes), len(p.Temporal), len(p.PCs), len(as), d)
	if d > 10*time.Second {
		t.Fatalf("Advise took %v", d)
	}
}
