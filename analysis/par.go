package analysis

import "math"

// The parallelism facts of a kernel context are a model of the launch and
// the GPU alone: kernelView caches them, and the estimators above it
// (issuebound.go, lifetime.go, parallelism.go) read them.

// par is what the parallelism model knows of a kernel context: its mean
// launch configuration, the GPU, its occupancy and the resident warps per
// scheduler.
type par struct {
	cfg LaunchConfig
	g   GPUSpec
	occ Occupancy
	// W is the resident warps per busy scheduler (grid-limited).
	W   float64
	sel float64 // the kernel's selected (issued) samples
}

// warpsPerScheduler is the resident warps per busy scheduler with
// blocksPerSM resident blocks (fewer when the grid is smaller).
func (p *par) warpsPerScheduler(blocksPerSM float64) float64 {
	wb := math.Ceil(p.cfg.Threads / 32)
	resident := math.Max(1, math.Min(blocksPerSM, p.cfg.GridBlocks/float64(p.g.SMs)))
	w := resident * wb
	return w / math.Min(float64(p.g.Schedulers), w)
}

// wave is one phase of a grid's run: full waves, or the tail.
type wave struct {
	share  float64 // the grid's blocks that run in it, as a share
	blocks float64 // resident blocks per busy SM
}

// waves splits a grid of gridBlocks blocks, blocksPerSM of them resident
// per SM on sms SMs, into its full waves and the tail: the last
// gridBlocks mod (blocksPerSM × sms) blocks run with fewer resident
// blocks per SM (spread evenly, at least one per busy SM).
func waves(gridBlocks, blocksPerSM, sms float64) []wave {
	if gridBlocks <= 0 || blocksPerSM <= 0 || sms <= 0 {
		return nil
	}
	perWave := blocksPerSM * sms
	full := math.Floor(gridBlocks / perWave)
	tail := gridBlocks - full*perWave
	var out []wave
	if full > 0 {
		out = append(out, wave{share: full * perWave / gridBlocks, blocks: blocksPerSM})
	}
	if tail > 0 {
		out = append(out, wave{share: tail / gridBlocks, blocks: math.Max(1, tail/sms)})
	}
	return out
}

// warpsIn is the resident warps per busy scheduler with `blocks` resident
// blocks per SM.
func (p *par) warpsIn(blocks float64) float64 {
	w := blocks * math.Ceil(p.cfg.Threads/32)
	return w / math.Min(float64(p.g.Schedulers), w)
}

// issueSamples is the samples `sel` selected samples of the profiled
// configuration need to issue with bpsNew resident blocks per SM, the
// warps issuing with probability rI: sel × W × mean(1/I(W')), W and W'
// averaged over the grid's blocks through its waves (issueFloor).
func (p *par) issueSamples(sel, rI, bpsNew float64) float64 {
	sms := float64(p.g.SMs)
	w := 0.0
	for _, v := range waves(p.cfg.GridBlocks, float64(p.occ.BlocksPerSM), sms) {
		w += v.share * p.warpsIn(v.blocks)
	}
	perIssue := 0.0
	for _, v := range waves(p.cfg.GridBlocks, bpsNew, sms) {
		perIssue += v.share / IssueRate(rI, p.warpsIn(v.blocks))
	}
	return sel * w * perIssue
}
