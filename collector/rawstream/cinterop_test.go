package rawstream

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// cWriter writes, with the injection library's C header, exactly the
// frames of everyFrame (one of every kind) to stdout.
const cWriter = `#include <stdio.h>
#include "gpuprof_wire.h"

int main(void) {
	gpw_buf b;
	gpw_buf_init(&b);
	int n = 0;
	gpw_hello_t h = {GPW_HELLO_SYNTHETIC, -1, 4242, GPW_MODE_REDUNDANCY, 50, 10, 1700000000000000000ull,
		"node01", "NVIDIA H100 80GB HBM3", "GPU-1234", "580.1", "13.0", 90, 1,
		132, 1980000, 2619000, 5120, 52428800, 65536, 233472, 2048, 85520809984ull};
	n += gpw_hello(&b, &h);
	uint64_t segs[4] = {0x555500001000ull, 0x2000, 0x555500004000ull, 0x100};
	n += gpw_host_module(&b, 0x555500000000ull, "/opt/app/bin/app", "abcdef", 2, segs);
	n += gpw_module(&b, 1, 0x1234, 5, 1, "\x7f" "ELFx");
	n += gpw_module(&b, 2, 0x1234, 5, 0, NULL);
	n += gpw_function(&b, 3, 1, 0x7f0000001000ull, 0x200, "_Z3shmPi");
	uint64_t af[2] = {0x555500001234ull, 0x555500001300ull};
	n += gpw_alloc(&b, 1, 0x1000, 4096, GPW_ALLOC_DEVICE, af, 2);
	gpw_launch_t l = {7, 3, {16, 1, 1}, {256, 1, 1}, 1024, 9, 1, 13};
	uint64_t lf[1] = {0x555500001111ull};
	n += gpw_launch(&b, &l, lf, 1);

	size_t off = gpw_access_begin(&b, 7);
	uint64_t addrs[32] = {0};
	uint8_t vals[32 * 16] = {0};
	gpw_access_record(&b, 0x7f0000001000ull, 3, 1, GPW_SPACE_NONE, GPW_ACC_BLOCK_ENTER, 0xffffffffu, 0, addrs, vals);
	addrs[0] = 0x1000; addrs[2] = 0x1008;
	uint8_t v4[32 * 4] = {0};
	v4[0] = 1; v4[1] = 2; v4[2] = 3; v4[3] = 4;
	v4[8] = 5; v4[9] = 6; v4[10] = 7; v4[11] = 8;
	gpw_access_record(&b, 0x7f0000001010ull, 3, 1, GPW_SPACE_GLOBAL, GPW_ACC_READ, 0x5, 4, addrs, v4);
	addrs[31] = 0x40;
	for (int i = 0; i < 16; i++) vals[31 * 16 + i] = 9;
	gpw_access_record(&b, 0x7f0000001020ull, 3, 1, GPW_SPACE_SHARED, GPW_ACC_WRITE | GPW_ACC_ATOMIC, 0x80000000u, 16, addrs, vals);
	gpw_access_record(&b, 0x7f0000001030ull, 3, 1, GPW_SPACE_NONE, GPW_ACC_BLOCK_EXIT, 0xffffffffu, 0, addrs, vals);
	n += gpw_access_finish(&b, off, 4);

	off = gpw_stall_reasons_begin(&b);
	gpw_stall_reason(&b, 0, "smsp__pcsamp_warps_issue_stalled_long_scoreboard");
	gpw_stall_reason(&b, 1, "smsp__pcsamp_warps_issue_stalled_selected");
	n += gpw_stall_reasons_finish(&b, off, 2);
	off = gpw_pc_samples_begin(&b, 7);
	gpw_pc_sample_pc(&b, 3, 0x10, 2);
	gpw_pc_sample_reason(&b, 0, 5);
	gpw_pc_sample_reason(&b, 1, 2);
	gpw_pc_sample_pc(&b, 3, 0x20, 0);
	n += gpw_pc_samples_finish(&b, off, 2);
	off = gpw_instr_counts_begin(&b, 7);
	gpw_instr_count(&b, 3, 0x10, 100, 3200);
	n += gpw_instr_counts_finish(&b, off, 1);
	n += gpw_kernel_end(&b, 7, 10, 20, 16, 1, 4, 1);
	n += gpw_free(&b, 0x1000);
	n += gpw_dropped(&b, 12, 3456, 789);
	gpw_launch_t g = {8, 3, {1, 1, 1}, {32, 1, 1}, 0, 9, GPW_LAUNCH_GRAPH, 0};
	uint64_t gf[1] = {0x555500002222ull};
	n += gpw_launch(&b, &g, gf, 1);
	n += gpw_end(&b, (uint64_t)n, 3);
	if (b.oom || n != 16) { fprintf(stderr, "writer failed: oom=%d frames=%d\n", b.oom, n); return 1; }
	fwrite(b.data, 1, b.len, stdout);
	gpw_buf_free(&b);
	return 0;
}
`

func TestCHeaderInterop(t *testing.T) {
	exe := ccBuild(t, "w", cWriter)
	stream, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	got, _, err := decodeAll(stream)
	if err != nil {
		t.Fatalf("decoding the C writer's stream: %v", err)
	}
	want := everyFrame()
	goBytes := encode(t, want) // also sets END's frame count
	if len(got) != len(want) {
		t.Fatalf("decoded %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("frame %d (%v): C wrote %+v, Go expects %+v", i, want[i].Kind(), got[i], want[i])
		}
	}
	// The Go writer produces the same bytes.
	if string(goBytes) != string(stream) {
		t.Errorf("the Go writer's %d bytes differ from the C writer's %d", len(goBytes), len(stream))
	}
}

// cCompact writes, with the C header's compact encoder, one ACCESS frame
// of records read from stdin (pc block warp space flags active size, then
// a hex address and hex value per active lane) to stdout.
const cCompact = `#include <stdio.h>
#include <inttypes.h>
#include "gpuprof_wire.h"

int main(void) {
	gpw_buf b;
	gpw_buf_init(&b);
	size_t off = gpw_access_begin(&b, 1);
	uint64_t pc, addrs[32];
	unsigned block, warp, space, flags, active, size, n = 0;
	uint8_t vals[32 * 16];
	while (scanf("%" SCNu64 " %u %u %u %u %u %u", &pc, &block, &warp, &space, &flags, &active, &size) == 7) {
		for (unsigned lane = 0; lane < 32; lane++) {
			if (!(active & (1u << lane)) || size == 0) continue;
			if (scanf("%" SCNx64, &addrs[lane]) != 1) return 2;
			for (unsigned i = 0; i < size; i++) {
				unsigned v;
				if (scanf("%2x", &v) != 1) return 2;
				vals[lane * size + i] = (uint8_t)v;
			}
		}
		gpw_access_record_compact(&b, pc, block, (uint16_t)warp, (uint8_t)space, (uint8_t)flags, active, (uint8_t)size, addrs, vals);
		n++;
	}
	if (!gpw_access_finish(&b, off, n) || b.oom) return 1;
	fwrite(b.data, 1, b.len, stdout);
	return 0;
}
`

// ccBuild compiles a C program against the library's wire header, or skips.
func ccBuild(t *testing.T, name, src string, extra ...string) string {
	t.Helper()
	hdr, err := filepath.Abs("../inject/gpuprof_wire.h")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(hdr); err != nil {
		t.Skipf("the C writer header is missing (%v)", err)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH")
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, name)
	args := []string{"-std=c99", "-O1", "-Wall", "-Werror", "-I", filepath.Dir(hdr), "-o", exe}
	if src != "" {
		f := filepath.Join(dir, name+".c")
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, f)
	}
	args = append(args, extra...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return exe
}

// TestCCompactInterop: the library's compact encoder and the Go one write
// the same bytes for the same records (random ones and a real capture's).
func TestCCompactInterop(t *testing.T) {
	exe := ccBuild(t, "compact", cCompact)
	rng := rand.New(rand.NewPCG(5, 6))
	var recs []Record
	for i := 0; i < 500; i++ {
		recs = append(recs, randomRecord(rng, rng.IntN(2) == 0, rng.IntN(2) == 0))
	}
	if data, err := os.ReadFile("../../testdata/captures/bank_conflict.redundancy.p1.gpr"); err == nil {
		frames, _, err := decodeAll(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			if a, ok := f.(*Access); ok {
				for it := a.Records(); it.Next(); {
					r := *it.Record()
					r.Lanes = append([]byte(nil), r.Lanes...)
					recs = append(recs, r)
				}
			}
		}
	}
	var in strings.Builder
	want := &Access{LaunchID: 1}
	for i := range recs {
		r := &recs[i]
		fmt.Fprintf(&in, "%d %d %d %d %d %d %d\n", r.PC, r.Block, r.Warp, r.Space, r.Flags, r.Active, r.Size)
		for e := 0; e < r.NumLanes(); e++ {
			a, v := r.Lane(e)
			fmt.Fprintf(&in, "%x %x\n", a, v)
		}
		want.AppendCompact(r)
	}
	cmd := exec.Command(exe)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("C encoder: %v", err)
	}
	var b bytes.Buffer
	if err := NewWriter(&b).Write(want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, b.Bytes()) {
		t.Fatalf("C wrote %d bytes, Go %d; they differ", len(out), b.Len())
	}
	t.Logf("%d records, %d bytes, identical", len(recs), len(out))
}

// TestGprdumpReadsCompact: the library's stream checker (gprdump, built
// from its C source) reports the same statistics for a real capture
// written plain and compact.
func TestGprdumpReadsCompact(t *testing.T) {
	src, err := filepath.Abs("../inject/tools/gprdump.c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(src); err != nil {
		t.Skipf("gprdump's source is missing (%v)", err)
	}
	exe := ccBuild(t, "gprdump", "", src, "-lm")
	for _, capture := range []string{"loop_reload.redundancy.p1.gpr", "single_value.redundancy.p50k10.gpr", "bank_conflict.redundancy.p1.gpr"} {
		data, err := os.ReadFile(filepath.Join("../../testdata/captures", capture))
		if err != nil {
			t.Skip(err)
		}
		plain, compact, _ := compactStream(t, data)
		dir := t.TempDir()
		var outs [2]string
		for i, b := range [][]byte{plain, compact} {
			f := filepath.Join(dir, fmt.Sprint(i))
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(exe, "--stats", f).CombinedOutput()
			if err != nil {
				t.Fatalf("gprdump %s: %v\n%s", capture, err, out)
			}
			// Byte counts differ, by design; everything else must not.
			var keep []string
			for _, l := range strings.Split(string(out), "\n") {
				if !strings.Contains(l, "bytes") {
					keep = append(keep, l)
				}
			}
			outs[i] = strings.Join(keep, "\n")
		}
		if outs[0] != outs[1] {
			t.Errorf("%s: gprdump reads the compact stream differently:\nplain:\n%s\ncompact:\n%s", capture, outs[0], outs[1])
		}
		if !strings.Contains(outs[1], "TEMPORAL") {
			t.Errorf("%s: no TEMPORAL line in gprdump's statistics:\n%s", capture, outs[1])
		}
	}
}

// TestCDeviceRecordLayout runs the library's own check of its device record
// layout (collector/inject/tools/abi_check.c): records laid out as the
// device patch writes them convert to exactly the bytes the wire encoder
// writes for the same lanes, and damaged headers are refused.
func TestCDeviceRecordLayout(t *testing.T) {
	src, err := filepath.Abs("../inject/tools/abi_check.c")
	if err != nil {
		t.Fatal(err)
	}
	exe := ccBuild(t, "abi_check", "", src)
	out, err := exec.Command(exe).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "abi_check: ok") {
		t.Fatalf("abi_check: %v\n%s", err, out)
	}
}
