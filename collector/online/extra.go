package online

import "gpuprof/collector/rawstream"

// extra holds the analyses added beside the redundancy workers: launch
// configurations and instance times (launchstats.go), bank conflicts and
// reuse distances (memstats.go). The Analyzer calls these hooks.
type extra struct {
	ls launchStats
	ms memStats
}

func (x *extra) start(workers, depth int) { x.ms.start(workers, depth) }

func (x *extra) stop() { x.ms.stop() }

func (x *extra) launch(ci uint32, fn *funcInfo, f *rawstream.Launch, l *launchInfo) {
	l.warps = int((uint64(f.Block[0])*uint64(f.Block[1])*uint64(f.Block[2]) + 31) / 32)
	x.ls.launch(ci, fn, f)
}

// build adds the item's launch statistics and memory statistics; accs are
// the shards' accumulators, which hold the divergence parts the
// redundancy workers counted.
func (x *extra) build(b *builder, accs []*acc) {
	x.ls.build(b)
	var mem []*memAcc
	for _, ac := range accs {
		if ac.mem != nil {
			mem = append(mem, ac.mem)
		}
	}
	x.ms.build(b, mem)
}
