package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// The user's path: what a new user meets running the built binary.

// runBin runs the gpuprof binary with args (and extra environment) and
// returns its stdout, stderr and exit status.
func runBin(t *testing.T, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return o.String(), e.String(), code
}

// fakeInject makes a stand-in injection library (and the device patches
// beside it): enough for run's checks; an application that does not use
// CUDA never loads it.
func fakeInject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	lib := filepath.Join(dir, "libgpuprof_inject.so")
	for _, f := range []string{lib, filepath.Join(dir, "gpuprof_patch.fatbin")} {
		if err := os.WriteFile(f, []byte("not a real library"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return lib
}

// TestRunFailsBeforeLaunching: every problem run can see before it starts
// is one line on stderr naming it, exit status 125, and nothing started:
// no output directory, no broker, no application.
func TestRunFailsBeforeLaunching(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildGpuprof(t)
	lib := fakeInject(t)
	dir := t.TempDir()
	// The application leaves a mark if it ever runs.
	mark := filepath.Join(dir, "ran")
	app := filepath.Join(dir, "app")
	os.WriteFile(app, []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755)
	noexec := filepath.Join(dir, "noexec")
	os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
	launcher := filepath.Join(dir, "mpirun")
	os.WriteFile(launcher, []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755)
	used := filepath.Join(dir, "used")
	os.MkdirAll(used, 0o755)
	os.WriteFile(filepath.Join(used, "report.txt"), []byte("an earlier run\n"), 0o644)
	withLib := []string{"GPUPROF_INJECT=" + lib}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"bad mode", withLib, []string{"--mode", "bogus", "--", app}, `--mode "bogus": want redundancy, pcsampling, hybrid, all`},
		{"library missing", []string{"GPUPROF_INJECT=" + filepath.Join(dir, "nolib.so")}, []string{"--", app}, "injection library " + filepath.Join(dir, "nolib.so") + " not found: give --inject FILE, set GPUPROF_INJECT, or build it with 'make inject'"},
		{"patches missing", []string{"GPUPROF_INJECT=" + app}, []string{"--", app}, "value tracing needs " + filepath.Join(dir, "gpuprof_patch.fatbin")},
		{"application missing", withLib, []string{"--", filepath.Join(dir, "nosuch")}, "application " + filepath.Join(dir, "nosuch") + ": no such file or directory"},
		{"application not on PATH", withLib, []string{"--", "gpuprof-no-such-command"}, `application "gpuprof-no-such-command" not found on PATH`},
		{"application not executable", withLib, []string{"--", noexec}, "application " + noexec + " is not executable"},
		{"application missing under a launcher", withLib, []string{"--", launcher, "-np", "2", "./nosuch"}, "application ./nosuch: no such file or directory"},
		{"launcher without a rank count", withLib, []string{"--", launcher, app}, "does not say how many ranks it starts: give --ranks N"},
		{"broker unreachable", withLib, []string{"--nats", "nats://127.0.0.1:1", "--", app}, "NATS broker unreachable (nats://127.0.0.1:1: connection refused)"},
		{"output directory in use", withLib, []string{"--", app}, "output directory " + used + " exists and is not empty: give --force"},
		{"unknown flag", withLib, []string{"--bogus", "--", app}, "flag provided but not defined: -bogus ('gpuprof run --help' lists the flags)"},
		{"bad rank timeout", withLib, []string{"--rank-timeout", "0s", "--", app}, "--rank-timeout 0s: want a positive duration"},
		{"nothing to run", withLib, nil, "no command to profile"},
		{"replay missing", withLib, []string{"--replay", filepath.Join(dir, "r{rank}.gpr"), "--", launcher, "-np", "2"}, "--replay " + filepath.Join(dir, "r0.gpr") + ": no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			if c.name == "output directory in use" {
				out = used
			}
			args := append([]string{"run", "-o", out, "--rank-timeout", "60s"}, c.args...)
			t0 := time.Now()
			stdout, stderr, code := runBin(t, bin, c.env, args...)
			took := time.Since(t0)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if code != exitFailure || len(lines) != 1 || !strings.HasPrefix(lines[0], "gpuprof run: ") || !strings.Contains(lines[0], c.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant status %d and one line with %q", code, stderr, exitFailure, c.want)
			}
			t.Logf("%s (%v)", lines[0], took.Round(time.Millisecond))
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Fatal("the application or launcher ran")
			}
			if c.name != "output directory in use" {
				if _, err := os.Stat(out); err == nil {
					t.Errorf("output directory %s was created", out)
				}
			} else if b, _ := os.ReadFile(filepath.Join(used, "report.txt")); string(b) != "an earlier run\n" {
				t.Errorf("the earlier run's report was touched")
			}
			// Well inside the rank timeout: nothing waited for ranks.
			if took > 20*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
}

// TestRunHelp: run --help prints on stdout and names --mode all and the
// exit status of gpuprof's own failures.
func TestRunHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildGpuprof(t)
	stdout, _, code := runBin(t, bin, nil, "run", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"redundancy | pcsampling | hybrid | all", "125", "--force", "standard error", "-inject"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("run --help lacks %q:\n%s", want, stdout)
		}
	}
	_, stderr, code := runBin(t, bin, nil)
	if code != 2 || !strings.Contains(stderr, "status 125") || !strings.Contains(stderr, "version") {
		t.Errorf("gpuprof alone: exit %d\n%s", code, stderr)
	}
}

// TestRunNothingMeasured: an application that never loads the injection
// library (a collector on another host without it, or a program that does
// not use CUDA) leaves its rank incomplete, with the reason, in every
// output, and the report says first that nothing was measured.
func TestRunNothingMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildGpuprof(t)
	lib := fakeInject(t)
	dir := t.TempDir()

	t.Run("application without the GPU", func(t *testing.T) {
		out := filepath.Join(dir, "nogpu")
		stdout, stderr, code := runBin(t, bin, []string{"GPUPROF_INJECT=" + lib}, "run", "-o", out, "--rank-timeout", "20s", "--", "/bin/echo", "APP-OUTPUT")
		if code != 0 {
			t.Fatalf("exit %d, want the application's 0\n%s", code, stderr)
		}
		if stdout != "APP-OUTPUT\n" {
			t.Errorf("stdout %q: want the application's output alone", stdout)
		}
		for _, want := range []string{"gpuprof: NOTHING MEASURED", "rank 0 incomplete: no stream from the application", "gpuprof: output in " + out} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
		checkIncompleteEverywhere(t, bin, out, "no stream from the application")
	})

	t.Run("collector without the library", func(t *testing.T) {
		// The launcher's ranks see another GPUPROF_INJECT than run did,
		// as on a host where the library is missing.
		launcher := filepath.Join(t.TempDir(), "mpirun")
		os.WriteFile(launcher, []byte("#!/bin/sh\nshift 2\nGPUPROF_INJECT=/nonexistent/libgpuprof_inject.so exec \"$@\"\n"), 0o755)
		out := filepath.Join(dir, "nolib")
		stdout, stderr, code := runBin(t, bin, []string{"GPUPROF_INJECT=" + lib}, "run", "-o", out, "--rank-timeout", "20s", "--", launcher, "-np", "1", "/bin/true")
		if code != exitFailure {
			t.Fatalf("exit %d, want %d (the application never ran: the collector failed)\n%s", code, exitFailure, stderr)
		}
		if stdout != "" {
			t.Errorf("stdout %q", stdout)
		}
		if !strings.Contains(stderr, "NOTHING MEASURED") || !strings.Contains(stderr, "rank 0 incomplete: injection library: stat /nonexistent/libgpuprof_inject.so") {
			t.Errorf("summary:\n%s", stderr)
		}
		checkIncompleteEverywhere(t, bin, out, "injection library: stat /nonexistent/libgpuprof_inject.so: no such file or directory")
	})
}

// checkIncompleteEverywhere: the text report opens with the nothing-measured
// line; it, the HTML, the JSON and pprof's comments name rank 0 incomplete
// with why.
func checkIncompleteEverywhere(t *testing.T, bin, out, why string) {
	t.Helper()
	rep, _, code := runBin(t, bin, nil, "report", out)
	lines := strings.SplitN(rep, "\n", 5)
	if code != 0 || len(lines) < 4 || !strings.HasPrefix(lines[2], "*** NOTHING MEASURED") || !strings.Contains(lines[2], why) {
		t.Errorf("report's first lines:\n%s", head(rep, 8))
	}
	if !regexp.MustCompile(`(?m)^Data: +none$`).MatchString(rep) || !strings.Contains(rep, "Incomplete:  rank 0 ("+why) {
		t.Errorf("report header:\n%s", head(rep, 12))
	}
	for _, f := range []string{"report.html", "profile.json"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || !strings.Contains(string(b), why) {
			t.Errorf("%s does not name the reason %q (%v)", f, why, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(out, "report.html")); !strings.Contains(string(b), `id="nothing-banner"`) {
		t.Error("report.html has no nothing-measured banner")
	}
	raw, _, _ := runBin(t, bin, nil, "export", "--format", "pprof", "-o", t.TempDir(), out)
	if f := strings.TrimSpace(raw); f != "" {
		if b, err := exec.Command("go", "tool", "pprof", "-raw", f).CombinedOutput(); err == nil && !strings.Contains(string(b), "INCOMPLETE: "+why) {
			t.Errorf("pprof comments do not name the reason:\n%s", head(string(b), 10))
		}
	}
}

// TestCollectorWithoutLibrary: the collector alone (as mpirun starts it
// on every host) makes its rank incomplete with the reason and exits 125.
func TestCollectorWithoutLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildGpuprof(t)
	local := filepath.Join(t.TempDir(), "rank.gpuprof")
	_, stderr, code := runBin(t, bin, nil, "collect", "--inject", "/nonexistent/lib.so", "--local", local, "--rank", "3", "--", "/bin/true")
	if code != exitFailure || !strings.Contains(stderr, "injection library: stat /nonexistent/lib.so") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	p, err := profile.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	if ri := p.Ranks[3]; ri == nil || !strings.Contains(ri.Incomplete, "injection library") {
		t.Fatalf("rank 3 provenance %+v", ri)
	}
	// A bad mode: the collection never starts, and the rank still says so.
	_, stderr, code = runBin(t, bin, nil, "collect", "--mode", "bogus", "--local", local, "--rank", "2", "--", "/bin/true")
	if code != exitFailure {
		t.Fatalf("bad mode: exit %d\n%s", code, stderr)
	}
	if p, err := profile.ReadFile(local); err != nil || p.Ranks[2] == nil || !strings.Contains(p.Ranks[2].Incomplete, "collector did not start") {
		t.Fatalf("bad mode: %v %+v", err, p)
	}
}

// TestOutputSafety: a second run into the same directory is refused;
// --force replaces gpuprof's outputs and nothing else; stdout is the
// application's.
func TestOutputSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildGpuprof(t)
	files, err := synth.WriteFiles(t.TempDir(), synth.Options{Ranks: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	launcher := filepath.Join(t.TempDir(), "mpirun")
	os.WriteFile(launcher, []byte("#!/bin/sh\nshift 2\necho APP-SAYS-HELLO\n\"$@\" >&2\n"), 0o755)
	out := filepath.Join(t.TempDir(), "o")
	args := []string{"run", "-o", out, "--replay", files[0], "--rank-timeout", "20s", "--", launcher, "-np", "1"}
	stdout, stderr, code := runBin(t, bin, nil, args...)
	if code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	if stdout != "APP-SAYS-HELLO\n" {
		t.Errorf("stdout %q: want the application's alone", stdout)
	}
	for _, want := range []string{"ranks done", "gpuprof: job ", "1 of 1 ranks reported, 0 incomplete", "gpuprof: advice 1:", "gpuprof: output in " + out} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	first, _ := os.ReadFile(filepath.Join(out, "report.txt"))
	os.WriteFile(filepath.Join(out, "notes.txt"), []byte("mine"), 0o644)

	_, stderr, code = runBin(t, bin, nil, args...)
	if code != exitFailure || !strings.Contains(stderr, "exists and is not empty: give --force") {
		t.Fatalf("second run: exit %d\n%s", code, stderr)
	}
	if again, _ := os.ReadFile(filepath.Join(out, "report.txt")); !bytes.Equal(again, first) {
		t.Error("the refused run changed the report")
	}
	_, stderr, code = runBin(t, bin, nil, append([]string{args[0], "--force"}, args[1:]...)...)
	if code != 0 {
		t.Fatalf("--force: exit %d\n%s", code, stderr)
	}
	again, _ := os.ReadFile(filepath.Join(out, "report.txt"))
	if bytes.Equal(again, first) || len(again) == 0 {
		t.Error("--force did not write a new report (the job id differs)")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "notes.txt")); string(b) != "mine" {
		t.Error("--force removed a file gpuprof did not write")
	}
}

// TestVersion: gpuprof version names the release, the commit line and the
// format versions this build writes.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildGpuprof(t)
	stdout, _, code := runBin(t, bin, nil, "version")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, re := range []string{`(?m)^gpuprof \d+\.\d+\.\d+`, `(?m)^commit: +\S`, `(?m)^wire format: +raw record stream version ` + itoa(rawstream.Version),
		`(?m)^profile format: +version ` + itoa(profile.FormatVersion) + ` .*batch schema ` + itoa(profile.BatchVersion)} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("version output lacks %s:\n%s", re, stdout)
		}
	}
}

func itoa(v int) string { return strconv.Itoa(v) }

// TestSmallErrors: a truncated profile says where it ends; export names
// its formats.
func TestSmallErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildGpuprof(t)
	dir := t.TempDir()
	p := profile.New("small")
	p.Add(p.Path(profile.Frame{Kind: profile.KindKernel, Function: "k"}).ID, profile.GPUTime, 10)
	full := filepath.Join(dir, "p.gpuprof")
	if err := profile.WriteFile(full, p); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(full)
	cut := filepath.Join(dir, "cut.gpuprof")
	os.WriteFile(cut, b[:len(b)/2], 0o600)
	_, stderr, code := runBin(t, bin, nil, "report", cut)
	want := "profile truncated at offset " + strconv.Itoa(len(b)/2)
	if code != exitFailure || !strings.Contains(stderr, want) || !strings.Contains(stderr, cut) {
		t.Errorf("truncated: exit %d: %s", code, stderr)
	}
	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, []byte("hello, not a profile"), 0o600)
	if _, stderr, _ := runBin(t, bin, nil, "report", other); !strings.Contains(stderr, "not a gpuprof profile") {
		t.Errorf("not a profile: %s", stderr)
	}
	_, stderr, code = runBin(t, bin, nil, "export", "--format", "nosuch", full)
	if code != exitFailure || !strings.Contains(stderr, `--format "nosuch": want one of hpctoolkit, pprof, json, html, text, all`) {
		t.Errorf("export --format nosuch: exit %d: %s", code, stderr)
	}
	stdout, _, _ := runBin(t, bin, nil, "collect", "--help")
	if !strings.Contains(stdout, "also publish a batch at least this often") {
		t.Errorf("collect --help: -batch-interval:\n%s", stdout)
	}
	if stdout, _, _ := runBin(t, bin, nil, "capture", "trim", "--help"); !strings.HasPrefix(stdout, "Usage: gpuprof capture trim") {
		t.Errorf("capture trim --help:\n%s", stdout)
	}
}

// TestSymtabReplaysElsewhere: a stream whose host binary is gone resolves
// its host frames from the symbol table gpuprof symtab wrote while the
// binary was there, exactly as from the binary; the demo uses a table
// beside its captures.
func TestSymtabReplaysElsewhere(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildGpuprof(t)
	dir := t.TempDir()
	files, err := synth.WriteFiles(t.TempDir(), synth.Options{Ranks: 1, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	// The stream's program: a copy of a real binary (this gpuprof), its
	// addresses moved into its code.
	app := filepath.Join(dir, "app")
	b, _ := os.ReadFile(bin)
	os.WriteFile(app, b, 0o755)
	stream := filepath.Join(dir, "app.pcsampling.gpr")
	rebaseExe(t, files[0], stream, app, 0x400000)
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	collect := func(name string, extra ...string) *profile.Profile {
		f := filepath.Join(dir, name)
		args := append([]string{"collect", "--replay", stream, "--local", f, "--sass", sassDir}, extra...)
		if _, stderr, code := runBin(t, bin, nil, args...); code != 0 {
			t.Fatalf("collect %v: exit %d\n%s", extra, code, stderr)
		}
		p, err := profile.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	withBinary := collect("with.gpuprof")
	hostFns := 0
	for _, n := range withBinary.Nodes {
		if n.Frame.Kind == profile.KindHostFrame && n.Frame.Module == app && n.Frame.Function != "" {
			hostFns++
		}
	}
	if hostFns == 0 {
		t.Fatal("no host frame resolved from the binary")
	}
	syms := filepath.Join(dir, "app.syms")
	if _, stderr, code := runBin(t, bin, nil, "symtab", "-o", syms, stream); code != 0 {
		t.Fatalf("symtab: exit %d\n%s", code, stderr)
	}
	st, _ := os.Stat(syms)
	t.Logf("%s: %d bytes for %d host frames", syms, st.Size(), hostFns)
	if st.Size() > 64<<10 {
		t.Errorf("table of %d bytes: it should hold only what the stream needs", st.Size())
	}
	os.Remove(app)
	withTable := collect("table.gpuprof", "--host-symbols", syms)
	without := collect("without.gpuprof")
	if !bytes.Equal(withTable.Encode(), withBinary.Encode()) {
		t.Errorf("frames from the table differ from the binary's:\n%s\n---\n%s", head(withTable.String(), 40), head(withBinary.String(), 40))
	}
	if bytes.Equal(without.Encode(), withBinary.Encode()) {
		t.Error("the binary is gone but frames still resolve without a table")
	}

	// The demo finds the table beside its captures.
	caps := filepath.Join(dir, "captures")
	os.MkdirAll(caps, 0o755)
	os.Rename(stream, filepath.Join(caps, "app.pcsampling.gpr"))
	os.Rename(syms, filepath.Join(caps, "app.syms"))
	os.WriteFile(filepath.Join(caps, demoManifest), []byte("app.pcsampling.gpr\n"), 0o644)
	out := filepath.Join(dir, "demo")
	if _, stderr, code := runBin(t, bin, nil, "demo", "-o", out, "--captures", caps); code != 0 {
		t.Fatalf("demo: exit %d\n%s", code, stderr)
	}
	p, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	resolved := 0
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindHostFrame && n.Frame.Module == app && n.Frame.Function != "" {
			resolved++
		}
	}
	if resolved != hostFns {
		t.Errorf("demo: %d host frames resolved, want %d", resolved, hostFns)
	}
	if _, stderr, code := runBin(t, bin, nil, "demo", "-o", out, "--captures", caps); code != exitFailure || !strings.Contains(stderr, "--force") {
		t.Errorf("demo into its own output again: exit %d: %s", code, stderr)
	}
}

// rebaseExe copies stream in to out with the synthetic program's module
// replaced by exe, loaded so that its addresses fall shift bytes further
// into the file (into exe's code).
func rebaseExe(t *testing.T, in, out, exe string, shift uint64) {
	t.Helper()
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	w := rawstream.NewWriter(&buf)
	d := rawstream.NewDecoder(f)
	moved := false
	for {
		fr, err := d.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := fr.(*rawstream.HostModule); ok && strings.HasSuffix(m.Path, "/probe") {
			m.Path, m.BuildID, m.Base = exe, "", m.Base-shift
			moved = true
		}
		if err := w.Write(fr); err != nil {
			t.Fatal(err)
		}
	}
	if !moved {
		t.Fatal("no program module in the synthetic stream")
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMakefileVariables: make build inject puts the library where
// gpuprof looks, and an OUT in the environment (as some machines set)
// moves nothing.
func TestMakefileVariables(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root, _ := filepath.Abs("../..")
	dry := func(env []string, args ...string) string {
		cmd := exec.Command("make", append([]string{"-n", "-C", root}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		b, _ := cmd.CombinedOutput()
		return string(b)
	}
	lib := filepath.Join(root, "bin", "lib")
	for _, env := range [][]string{nil, {"OUT=/tmp/elsewhere"}} {
		inj := dry(env, "inject")
		if !strings.Contains(inj, "INJECT_LIBDIR="+lib) {
			t.Errorf("make inject (env %v) does not build into %s:\n%s", env, lib, inj)
		}
		sub := exec.Command("make", "-n", "-C", filepath.Join(root, "collector", "inject"), "CUDA=/nonexistent")
		sub.Env = append(os.Environ(), env...)
		b, _ := sub.CombinedOutput()
		if !strings.Contains(string(b), filepath.Join(lib, "libgpuprof_inject.so")) || strings.Contains(string(b), "/tmp/elsewhere") {
			t.Errorf("collector/inject's Makefile (env %v) does not write bin/lib:\n%s", env, b)
		}
		if demo := dry(env, "demo"); !strings.Contains(demo, "demo --force -o gpuprof-demo") || strings.Contains(demo, "elsewhere") {
			t.Errorf("make demo (env %v):\n%s", env, demo)
		}
	}
	for _, mk := range []string{"Makefile", "collector/inject/Makefile", "testdata/cuda/Makefile"} {
		b, err := os.ReadFile(filepath.Join(root, mk))
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`(?m)^\s*OUT\s*[:?+]?=|\$\(OUT\)`).Match(b) {
			t.Errorf("%s uses a variable named OUT", mk)
		}
	}
	// gpuprof looks in lib/ beside itself: bin/lib for bin/gpuprof.
	if strings.Contains(dry(nil, "demo"), "setup") || strings.Contains(dry(nil, "demo"), "apt-get") {
		t.Error("make demo installs packages")
	}
}
