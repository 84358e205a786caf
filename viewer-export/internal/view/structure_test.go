package view

import (
	"testing"

	"gpuprof/profile"
)

// Kernels without lines are listed with the library that launched them
// and why: the collector's reason, or no line table.
func TestNoSourceKernels(t *testing.T) {
	p := profile.New("t")
	host := profile.Frame{Kind: profile.KindHostFrame, Module: "/usr/lib/x86_64-linux-gnu/libcublasLt.so.13", Offset: 0x10}
	app := profile.Frame{Kind: profile.KindHostFrame, Module: "/opt/app/bin/app", Function: "main", File: "app.cu", Line: 3}
	kernel := func(name string) profile.Frame {
		return profile.Frame{Kind: profile.KindKernel, Module: "00000000000000aa", Function: name}
	}
	gpu := func(name string) profile.Frame {
		return profile.Frame{Kind: profile.KindGPUFunction, Module: "00000000000000aa", Function: name}
	}
	inst := profile.Frame{Kind: profile.KindInstruction, Offset: 0x10}
	line := profile.Frame{Kind: profile.KindLine, File: "k.cu", Line: 7}

	// cuBLAS: structure, no lines.
	n := p.Path(host, kernel("gemm"), gpu("gemm"), inst)
	p.Add(n.ID, profile.InstSamples, 5)
	// The application's kernel: lines.
	n = p.Path(app, kernel("_Z3appv"), gpu("_Z3appv"), line, inst)
	p.Add(n.ID, profile.InstSamples, 5)
	// Left without structure on two ranks.
	k := p.Path(app, kernel("_Z4flatv"))
	p.Add(k.ID, profile.Metric(profile.StructureMissingPrefix+"timeout"), 2)
	n = p.Path(app, kernel("_Z4flatv"), gpu("_Z4flatv"), inst)
	p.Add(n.ID, profile.InstSamples, 1)

	got := map[string]NoSource{}
	for _, k := range NoSourceKernels(p) {
		got[k.Name] = k
	}
	if len(got) != 2 {
		t.Fatalf("%v", got)
	}
	if g := got["gemm"]; g.Library != "libcublasLt.so.13" || g.Why != "no line table" {
		t.Errorf("cuBLAS kernel: %+v", g)
	}
	if g := got["flat()"]; g.Library != "app" || g.Why != "its structure was not ready within the bound (2 ranks or functions)" {
		t.Errorf("flat kernel: %+v", g)
	}
}
