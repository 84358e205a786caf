package profile_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

// TestMergeAllMatchesMerge checks MergeAll against successive Merge calls:
// the same bytes and the same errors, for parts that are disjoint, already
// held (a replayed partial), partly overlapping (refused) and of another
// job, on the sequential path and with every table merged in parallel.
func TestMergeAllMatchesMerge(t *testing.T) {
	for _, par := range []bool{false, true} {
		if par {
			defer profile.SetParallel(4, 3)()
		}
		for seed := uint64(1); seed <= 3; seed++ {
			// Three children of a reducer node: ranks 0-2, 3-5 (rank 5 open),
			// and 6-7 (rank 6 sealed as incomplete).
			var parts []*profile.Profile
			for c := 0; c < 3; c++ {
				q := profile.New("job1")
				for r := int32(3 * c); r < int32(3*c+3) && r < 8; r++ {
					for i, it := range proftest.Rank("job1", seed, proftest.Small, r, 2) {
						if (r == 5 || r == 6) && i == 2 {
							break
						}
						if err := q.Merge(it); err != nil {
							t.Fatal(err)
						}
					}
				}
				if c == 2 {
					q.SealRanks([]int32{6}, func(int32) string { return "rank timeout" })
				}
				parts = append(parts, q)
			}
			overlap := proftest.Item("job1", seed, proftest.Small, 1, 0, false, 0)
			if err := overlap.Merge(proftest.Item("job1", seed, proftest.Small, 1, 7, false, 0)); err != nil {
				t.Fatal(err)
			}
			parts = append(parts, parts[0], overlap, proftest.Item("job2", seed, proftest.Small, 9, 0, false, 0), nil)

			want := profile.New("job1")
			var wantErrs []error
			for _, q := range parts {
				wantErrs = append(wantErrs, want.Merge(q))
			}
			got := profile.New("job1")
			gotErrs := got.MergeAll(parts)
			for i := range parts {
				var ow, og *profile.OverlapError
				if (wantErrs[i] == nil) != (gotErrs[i] == nil) || errors.As(wantErrs[i], &ow) != errors.As(gotErrs[i], &og) {
					t.Fatalf("parallel=%v seed %d part %d: error %v, Merge gives %v", par, seed, i, gotErrs[i], wantErrs[i])
				}
			}
			if !bytes.Equal(got.Encode(), want.Encode()) {
				t.Fatalf("parallel=%v seed %d: MergeAll differs from Merge:\n%s\nwant:\n%s", par, seed, got, want)
			}
			if fmt.Sprint(got.IncompleteRanks()) != "[6]" || got.Sealed(5) {
				t.Fatalf("parallel=%v seed %d: incomplete %v, rank 5 sealed %v", par, seed, got.IncompleteRanks(), got.Sealed(5))
			}
		}
	}
}
