package reducer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

// MergeUnplanned merges into p (a job's final profile) the items of ranks
// that published to the job's input stream but are not in the plan: a
// command that started more CUDA processes than its launcher said (a
// Python program forking workers, a torchrun worker group restarted) gets
// rank ids past the expected count from its collector, and no leaf
// consumes them. Their items are still in the stream when the application
// has ended, since only the leaves purge, and only their own ranks. It
// returns the ranks merged, ascending; a rank whose items are not all
// there is sealed as incomplete, saying so.
func MergeUnplanned(ctx context.Context, conn *broker.Conn, job string, tree *Tree, p *profile.Profile) ([]int32, error) {
	stream, err := conn.Stream(ctx, job)
	if err != nil {
		return nil, err
	}
	var info *jetstream.StreamInfo
	err = broker.RetryAPI(ctx, broker.DefaultRetry, func(ctx context.Context) error {
		info, err = stream.Info(ctx, jetstream.WithSubjectFilter(broker.JobSubjects(job)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reducer: listing the ranks of job %s: %w", job, err)
	}
	planned := make(map[int32]bool, len(tree.Ranks))
	for _, r := range tree.Ranks {
		planned[r] = true
	}
	seen := map[int32]bool{}
	var ranks []int32
	for subj := range info.State.Subjects {
		s, err := broker.ParseSubject(subj)
		if err != nil || (s.Kind != broker.SubjectBatch && s.Kind != broker.SubjectDone) || planned[s.Rank] || seen[s.Rank] {
			continue
		}
		seen[s.Rank] = true
		ranks = append(ranks, s.Rank)
	}
	if len(ranks) == 0 {
		return nil, nil
	}
	sort.Slice(ranks, func(i, j int) bool { return ranks[i] < ranks[j] })
	var filters []string
	for _, r := range ranks {
		filters = append(filters, broker.BatchSubject(job, r), broker.DoneSubject(job, r))
	}
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("reducer: reading ranks %v of job %s: %w", ranks, job, err)
	}
	type key struct {
		rank int32
		seq  uint32
	}
	asm := map[key]*profile.Assembler{}
	bad := map[int32]string{}
	for {
		b, err := oc.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("reducer: reading ranks %v of job %s: %w", ranks, job, err)
		}
		got, pending := 0, uint64(0)
		for m := range b.Messages() {
			got++
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
			h, err := profile.ParseHeader(m.Data())
			if err != nil || h.Job != job || !seen[h.Rank] {
				continue
			}
			k := key{h.Rank, h.Seq}
			a := asm[k]
			if a == nil {
				a = &profile.Assembler{}
				asm[k] = a
			}
			item, _, err := a.Add(m.Data())
			if errors.Is(err, profile.ErrIncomplete) {
				continue
			}
			delete(asm, k)
			if err == nil {
				err = p.Merge(item)
			}
			if err != nil && bad[h.Rank] == "" {
				bad[h.Rank] = fmt.Sprintf("item %d not merged: %v", h.Seq, err)
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("reducer: reading ranks %v of job %s: %w", ranks, job, err)
		}
		if got == 0 || pending == 0 {
			break
		}
	}
	p.SealRanks(ranks, func(r int32) string {
		why := "not in the plan, and items are missing"
		if bad[r] != "" {
			why = "not in the plan: " + bad[r]
		}
		return why
	})
	return ranks, nil
}
