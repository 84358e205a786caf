package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// version is gpuprof's release; a build may set it with
// -ldflags "-X main.version=...".
var version = "0.1.0"

// commit is the source commit when the build set it (make build does, with
// -ldflags "-X main.commit=..."): Go stamps its build information with the
// commit only where .git is a directory, not in a git worktree.
var commit = ""

func init() {
	register("version", "print gpuprof's version, commit and format versions", cmdVersion)
}

func cmdVersion(args []string) error {
	fs := newFlags("version", "", `
Prints gpuprof's version, the commit it was built from (from Go's build
information: "modified" when the tree had uncommitted changes), the version
of the raw record stream the injection library writes (docs/wire.md), of
the profile encoding and of the batch schema, and the Go toolchain.`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Println(versionText())
	return nil
}

// versionText is what gpuprof version prints.
func versionText() string {
	rev, when, modified := commit, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = "unknown (built outside a git checkout)"
	}
	if len(rev) == 40 {
		rev = rev[:12]
	}
	if modified {
		rev += " (modified)"
	}
	if when != "" {
		rev += ", " + when
	}
	return fmt.Sprintf("gpuprof %s\ncommit:          %s\nwire format:     raw record stream version %d (reads %d to %d)\nprofile format:  version %d (reads %d to %d), batch schema %d\ngo:              %s %s/%s",
		version, rev, rawstream.Version, rawstream.MinVersion, rawstream.Version,
		profile.FormatVersion, profile.OldestFormatVersion, profile.FormatVersion, profile.BatchVersion,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
