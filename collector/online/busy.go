package online

import "time"

// Busy is where an analyzer's time went, for the overhead figures
// (analysis time against kernel time).
type Busy struct {
	Workers int
	// WorkerBusy is the time the workers spent analysing records, summed
	// over workers (about their CPU time: they never sleep while busy).
	WorkerBusy time.Duration
	// Blocked is the time the caller of Add waited on a full worker queue:
	// the analysis was the bottleneck and the stream reader stood still.
	Blocked time.Duration
	// MemBlocked is the same wait on the memory workers' queues (records
	// go to them by block, so a few blocks' records load one worker).
	MemBlocked time.Duration
	// MemBusy is the memory workers' time analysing records, summed.
	MemBusy time.Duration
	// BarrierWait, Resolve and Build are the caller's waits for the
	// workers at spatial barriers, the candidate resolution and the
	// building of items.
	BarrierWait, Resolve, Build time.Duration
	// Barriers counts the spatial barriers (flushes included), Early
	// those a worker's full candidate tables brought forward (candLimit).
	Barriers, EarlyBarriers int
	// Sampled counts the (launch, object, kind) whose spatial values
	// came to be sampled by hash, MaxLevel the highest level reached
	// (sample.go).
	Sampled  int
	MaxLevel uint8
}

// Busy returns the analyzer's time accounts so far. Call it from the
// goroutine that calls Add.
func (a *Analyzer) Busy() Busy {
	b := Busy{Workers: len(a.workers), Blocked: a.tBlocked, MemBlocked: a.tMemBlocked, BarrierWait: a.tWait, Resolve: a.tResolve, Build: a.tBuild,
		Barriers: a.barriers, EarlyBarriers: a.earlyBarriers, Sampled: a.sampled, MaxLevel: a.maxLevel}
	for _, w := range a.workers {
		b.WorkerBusy += time.Duration(w.busy.Load())
	}
	for _, w := range a.x.ms.all {
		b.MemBusy += time.Duration(w.busy.Load())
	}
	return b
}
