package reducer_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gpuprof/broker"
	"gpuprof/collector/publish"
	"gpuprof/profile"
	"gpuprof/profile/proftest"
	"gpuprof/reducer"
)

// benchJob is 64 realistic ranks (one data batch and the done item each),
// encoded once as the collectors would publish them.
type benchJob struct {
	chunks [][][][]byte // rank, item, chunk
	wire   int          // compressed bytes
	raw    int          // uncompressed profile bytes
}

var (
	benchOnce sync.Once
	bench64   benchJob
)

func realisticJob(b testing.TB, payload int) *benchJob {
	benchOnce.Do(func() {
		const ranks = 64
		j := &bench64
		j.chunks = make([][][][]byte, ranks)
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, runtime.GOMAXPROCS(0))
		for r := 0; r < ranks; r++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				items := proftest.Rank("JOB", 1, proftest.Realistic, int32(r), 1)
				for i, it := range items {
					cs, err := profile.EncodeBatch(it, i == len(items)-1, payload)
					if err != nil {
						panic(err)
					}
					raw := len(it.Encode())
					mu.Lock()
					j.chunks[r] = append(j.chunks[r], cs)
					j.raw += raw
					for _, c := range cs {
						j.wire += len(c)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	})
	return &bench64
}

// publishChunks publishes item which of every rank (-1: all items), each
// rank through its own Publisher and connection, as the collectors do.
func publishChunks(b testing.TB, e *broker.Embedded, job string, j *benchJob, which int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for r := range j.chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := broker.Connect(e.Options(fmt.Sprint("rank ", r)))
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			p, err := publish.New(c, publish.Config{Job: job})
			if err != nil {
				b.Error(err)
				return
			}
			for i, cs := range j.chunks[r] {
				if which >= 0 && i != which {
					continue
				}
				if err := p.PublishChunks(ctx, cs); err != nil {
					b.Error(err)
					return
				}
			}
			if err := p.Close(ctx); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}

// BenchmarkTree64 measures the reduction tree end to end on the embedded
// broker, for 64 realistic ranks and fan-in 8, all nodes in this process.
// "stored" reduces batches already in the stream: the tree's throughput
// (compressed MB/s in, uncompressed MB/s merged, rank profiles/s). "live"
// runs the tree while the ranks publish their data batches, waits until
// they are merged, then publishes the done items, as ranks finishing
// together do, and reports the tail: from the last done item stored to the
// final profile stored.
func BenchmarkTree64(b *testing.B) {
	e := startBroker(b)
	c := connect(b, e, "reducer")
	j := realisticJob(b, c.ChunkPayload())
	log, _ := newLogger(b)
	for _, live := range []bool{false, true} {
		name := "stored"
		if live {
			name = "live"
		}
		b.Run(name, func(b *testing.B) {
			var elapsed, tail time.Duration
			var st *reducer.TreeStats
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				const job = "JOB" // the batches were encoded for it; the stream is deleted after each run
				ensureStream(b, c, job)
				if !live {
					publishChunks(b, e, job, j, -1)
				}
				cfg := treeConfig(b, c, job, 64, 8, log)
				cfg.PartialInterval = time.Second
				ready := make(chan reducer.NodeName, 100)
				cfg.OnReady = func(n reducer.NodeName) { ready <- n }
				var merged atomic.Uint64
				cfg.ProgressInterval = 50 * time.Millisecond
				cfg.OnProgress = func(p reducer.Progress) { merged.Store(p.BatchesMerged) }
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				type result struct {
					st  *reducer.TreeStats
					err error
				}
				res := make(chan result, 1)
				b.StartTimer()
				t0 := time.Now()
				go func() {
					_, st, err := reducer.RunTree(ctx, cfg)
					res <- result{st, err}
				}()
				if live {
					for range cfg.Tree.Nodes() {
						<-ready
					}
					publishChunks(b, e, job, j, 0)
					waitFor(b, "the data batches merged", 5*time.Minute, func() bool { return merged.Load() == 64 })
					time.Sleep(3 * cfg.PartialInterval) // their partials out
					publishChunks(b, e, job, j, 1)
				}
				r := <-res
				elapsed = time.Since(t0)
				b.StopTimer()
				cancel()
				if r.err != nil {
					b.Fatal(r.err)
				}
				st, tail = r.st, r.st.Tail
				if err := c.DeleteJob(context.Background(), job); err != nil {
					b.Fatal(err)
				}
			}
			if live {
				b.ReportMetric(float64(tail.Milliseconds()), "tail-ms")
			} else {
				b.ReportMetric(elapsed.Seconds(), "s")
				b.ReportMetric(float64(j.wire)/(1<<20)/elapsed.Seconds(), "MB/s")
				b.ReportMetric(float64(j.raw)/(1<<20)/elapsed.Seconds(), "raw-MB/s")
				b.ReportMetric(64/elapsed.Seconds(), "profiles/s")
			}
			var root reducer.NodeStats
			if n := len(st.Nodes); n > 0 {
				root = st.Nodes[n-1]
			}
			b.Logf("%s: %.1f MB on the wire (%.0f MB raw), %d partials (%.1f MB), elapsed %v, tail %v; root: decode %v merge %v encode %v",
				st.Plan, float64(j.wire)/(1<<20), float64(j.raw)/(1<<20), st.Partials, st.PartialMB, elapsed.Round(time.Millisecond), tail.Round(time.Millisecond),
				root.DecodeTime.Round(time.Millisecond), root.MergeTime.Round(time.Millisecond), root.EncodeTime.Round(time.Millisecond))
		})
	}
}
