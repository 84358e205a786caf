package sass

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeTool writes a shell script standing in for nvdisasm.
func fakeTool(t *testing.T, body string) string {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	p := filepath.Join(t.TempDir(), "nvdisasm")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunNVDisasm(t *testing.T) {
	// The tool gets NVDisasmArgs, the extra options, then the cubin's
	// path, whose content it can read.
	tool := fakeTool(t, `for a in "$@"; do last=$a; done; echo "$@"; cat "$last"`)
	out, err := RunNVDisasm(tool, []byte("CUBIN"), 10*time.Second, "-fun", "3")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := strings.Join(append(append([]string{}, NVDisasmArgs...), "-fun", "3"), " ") + " "
	if len(lines) != 2 || !strings.HasPrefix(lines[0], want) || !strings.HasSuffix(lines[0], "module.cubin") || lines[1] != "CUBIN" {
		t.Errorf("output %q, want the arguments %q... module.cubin, then the cubin", out, want)
	}

	fail := fakeTool(t, `echo "bad cubin" >&2; exit 2`)
	if _, err := RunNVDisasm(fail, []byte("x"), 10*time.Second); err == nil || !strings.Contains(err.Error(), "bad cubin") {
		t.Errorf("failing tool: %v, want its standard error", err)
	}
	slow := fakeTool(t, `exec sleep 10`)
	if _, err := RunNVDisasm(slow, []byte("x"), 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no answer within") {
		t.Errorf("slow tool: %v, want a timeout", err)
	}
}
