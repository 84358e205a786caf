package main

import (
	"os"
	"path/filepath"
	"testing"

	"gpuprof/collector/analyze"
	"gpuprof/profile"
)

// The root and report parse the listing a collector shared (saved in the
// output directory) before anything else; an unusable one falls back to
// the nvdisasm outputs given.
func TestSavedListing(t *testing.T) {
	text, err := os.ReadFile("../../testdata/sass/probe/k.hex.txt")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h := profile.ModuleHash(0xabc)
	os.MkdirAll(filepath.Join(dir, ModulesDir), 0o700)
	if err := os.WriteFile(listingFile(dir, h), analyze.EncodeListing(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p := profile.New("t")
	mods, err := moduleSource(dir, "", p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mods.Module(h)
	if err != nil || m == nil || m.Func("_Z4vec4PK6float4PS_iPs") == nil {
		t.Fatalf("saved listing: %v %v", m, err)
	}
	// Corrupt: no usable listing and no other source names the module.
	h2 := h + 1
	os.WriteFile(listingFile(dir, h2), []byte("not zstd"), 0o600)
	if m, err := mods.Module(h2); err == nil || m != nil {
		t.Fatalf("corrupt listing: %v %v", m, err)
	}
}
