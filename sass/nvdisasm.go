package sass

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// NVDisasmArgs are the nvdisasm options of every listing gpuprof makes
// (before the function selection and the cubin's path): code only, line
// information with inlining, and the encodings, whose control bits the
// stall blamer needs. One set for the collectors and the root, so a
// listing shared through the broker or the disk cache serves both.
var NVDisasmArgs = []string{"-c", "-g", "-gi", "-hex"}

// RunNVDisasm writes cubin to a temporary file and returns nvdisasm's
// listing of it (NVDisasmArgs, then extra), within timeout.
func RunNVDisasm(tool string, cubin []byte, timeout time.Duration, extra ...string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "gpuprof-cubin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "module.cubin")
	if err := os.WriteFile(f, cubin, 0o600); err != nil {
		return nil, err
	}
	return RunNVDisasmFile(tool, f, timeout, extra...)
}

// RunNVDisasmFile returns nvdisasm's listing of the cubin file at path cubin
// (NVDisasmArgs, then extra), within timeout.
func RunNVDisasmFile(tool, cubin string, timeout time.Duration, extra ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	args := append(append(append([]string(nil), NVDisasmArgs...), extra...), cubin)
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("nvdisasm: no answer within %v", timeout)
		}
		return nil, fmt.Errorf("nvdisasm: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}
