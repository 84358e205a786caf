package main

import (
	"flag"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestCollectorFlagsArgs(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf := newCollectorFlags(fs)
	cf.Path("inject", "", "", absPath)
	cf.String("mode", "", "")
	cf.Int("block-sampling", 0, "")
	cf.Int("kernel-sampling", 0, "")
	cf.Bool("python-frames", false, "")
	cf.Bool("no-values", false, "")
	cf.Uint64("batch-records", 0, "")
	cf.Duration("batch-interval", 0, "")
	cf.Path("sass", "default.sass", "", absList)
	fs.Int("fan-in", 8, "") // run's own: never forwarded
	if err := fs.Parse([]string{"--batch-interval", "90s", "--block-sampling", "4", "--kernel-sampling", "0",
		"--python-frames", "--inject", "lib.so", "--batch-records", "1000", "--fan-in", "2"}); err != nil {
		t.Fatal(err)
	}
	abs := func(f string) string { a, _ := filepath.Abs(f); return a }
	// Definition order; zero values (and false) left out; a default that
	// is not zero is forwarded; files made absolute.
	want := []string{"--inject", abs("lib.so"), "--block-sampling", "4", "--python-frames",
		"--batch-records", "1000", "--batch-interval", (90 * time.Second).String(), "--sass", abs("default.sass")}
	if got := cf.args(); !slices.Equal(got, want) {
		t.Errorf("args %q, want %q", got, want)
	}
}
