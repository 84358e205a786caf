package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
)

func init() {
	register("synth", "write generated raw streams for N ranks (no GPU needed)", cmdSynth)
}

func cmdSynth(args []string) error {
	fs := newFlags("synth", "[flags] -o DIR", `
Writes one raw record stream per rank (the format the injection library
writes, docs/wire.md), generated rather than measured: kernels with host call
paths, allocations, access records whose values follow chosen patterns, PC
samples, with a chosen per-rank imbalance. Every stream says "synthetic" in
its header, and so does every report made from it. Replay a stream with
'gpuprof collect --replay FILE'.`)
	out := fs.String("o", "synth-streams", "output directory")
	var o synth.Options
	fs.IntVar(&o.Ranks, "ranks", 8, "ranks")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed (everything is a function of it and the rank)")
	mode := fs.String("mode", "redundancy", "redundancy | pcsampling | hybrid")
	fs.IntVar(&o.Iterations, "iterations", 4, "iterations of the generated program's main loop")
	fs.Float64Var(&o.Imbalance, "imbalance", 1, "the heavy ranks do (1+imbalance) times the work of the others")
	heavy := fs.String("heavy", "0", "the heavy ranks, comma-separated")
	fs.IntVar(&o.RanksPerHost, "ranks-per-host", 4, "consecutive ranks per host")
	fs.IntVar(&o.GPUs, "gpus", 0, "GPUs per host, the ranks spread over them by local rank (pcsampling: the first rank of each GPU samples it, the others give kernel times only); 0: a GPU per rank")
	p := fs.Uint("block-sampling", 8, "block sampling period P")
	k := fs.Uint("kernel-sampling", 2, "kernel sampling period K")
	fs.IntVar(&o.Scale, "scale", 1, "multiplies every grid")
	pattern := fs.String("pattern", "", "force one value pattern: single, dominant, few, close, random")
	if err := parseAll(fs, args); err != nil {
		return err
	}
	var err error
	if o.Mode, err = rawstream.ParseMode(*mode); err != nil {
		return err
	}
	if *pattern != "" {
		if o.Pattern, err = synth.ParsePattern(*pattern); err != nil {
			return err
		}
	}
	o.BlockSampling, o.KernelSampling = uint32(*p), uint32(*k)
	o.Heavy = []int{}
	for _, f := range strings.Split(*heavy, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := strconv.Atoi(f)
		if err != nil || r < 0 {
			return fmt.Errorf("synth: --heavy %q: want comma-separated ranks", *heavy)
		}
		o.Heavy = append(o.Heavy, r)
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return err
	}
	files, err := synth.WriteFiles(*out, o)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Println(f)
	}
	return nil
}
