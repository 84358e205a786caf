package analysis

import (
	"strings"
	"testing"

	"gpuprof/profile"
)

func TestDeviceSpec(t *testing.T) {
	withGPU := func(name string, props profile.GPUProps) *profile.Profile {
		p := profile.New("j")
		ri := p.Rank(0)
		ri.GPU, ri.Props = name, props
		return p
	}
	// An H100 PCIe is sm_90 like the SXM part, with fewer SMs and a lower
	// clock, and its memory system was never probed.
	pcie := DeviceSpec(withGPU("NVIDIA H100 PCIe", profile.GPUProps{SMs: 114, ClockKHz: 1755000, RegsPerSM: 65536, SharedPerSM: 233472, ThreadsPerSM: 2048}), 90)
	if pcie.SMs != 114 || pcie.ClockGHz != 1.755 || pcie.Memory.Measured() || pcie.Name != "H100 PCIe" {
		t.Errorf("H100 PCIe spec %+v", pcie)
	}
	if !strings.Contains(pcie.Describe(), "114 SMs, 1755 MHz") || !strings.Contains(pcie.Describe(), "not measured") {
		t.Errorf("describe: %s", pcie.Describe())
	}
	sxm := DeviceSpec(withGPU(measuredGPU, profile.GPUProps{SMs: 132, ClockKHz: 1980000, SharedPerSM: 233472}), 90)
	if sxm.SMs != 132 || !sxm.Memory.Measured() || sxm.SharedPerSM != 228<<10 {
		t.Errorf("H100 SXM spec %+v", sxm)
	}
	// A profile from before the library read the device: the architecture's.
	if old := DeviceSpec(profile.New("j"), 90); old != &H100 {
		t.Errorf("without device properties: %+v", old)
	}
	if DeviceSpec(profile.New("j"), 75) != nil {
		t.Error("an unknown architecture has no spec")
	}
}
