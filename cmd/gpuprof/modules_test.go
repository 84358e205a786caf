package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/collector/online"
	"gpuprof/collector/online/nvdisasmtest"
	"gpuprof/profile"
	"gpuprof/sass"
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
	if err := os.WriteFile(listingFile(dir, h), sass.EncodeListing(text), 0o600); err != nil {
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

// The root's module holds the profile's functions only, from the listings
// cache of this machine, and gpuprof run saves it beside the profile.
func TestModuleOfProfileFunctions(t *testing.T) {
	text, err := os.ReadFile("../../testdata/sass/probe/k.hex.txt")
	if err != nil {
		t.Fatal(err)
	}
	whole, err := sass.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	const kernel = "_Z6reloadPKfPfii"
	piece, ok := sass.FunctionListing(text, whole, kernel)
	if !ok {
		t.Fatal("no listing of the kernel")
	}
	t.Setenv("GPUPROF_CACHE_DIR", t.TempDir())
	h := profile.ModuleHash(0x1234)
	if err := online.DefaultDiskCache().Put(h, kernel, "nvdisasm-x", piece); err != nil {
		t.Fatal(err)
	}
	p := profile.New("t")
	p.AddModule(profile.Module{Hash: h, SM: 90})
	p.AddFunc(h, kernel)
	p.AddFunc(h, "$_Z6reloadPKfPfii$_Z6helperPKfi") // a subroutine of its section
	dir := t.TempDir()
	mods, err := moduleSource(dir, "", p)
	if err != nil {
		t.Fatal(err)
	}
	mods.saveBack = true
	m, err := mods.Module(h)
	if err != nil {
		t.Fatal(err)
	}
	if m.Func(kernel) == nil || m.Func("$_Z6reloadPKfPfii$_Z6helperPKfi") == nil || len(m.Functions) != 2 {
		var names []string
		for _, f := range m.Functions {
			names = append(names, f.Name)
		}
		t.Fatalf("module functions %v", names)
	}
	// Saved: a report later reads it without the cache.
	t.Setenv("GPUPROF_CACHE_DIR", "off")
	mods2, _ := moduleSource(dir, "", p)
	if m2, err := mods2.Module(h); err != nil || m2.Func(kernel) == nil {
		t.Fatalf("saved listing: %v", err)
	}
	// Without any source the error names the functions and why.
	p.AddFunc(h+1, "k")
	p.AddModule(profile.Module{Hash: h + 1})
	mods3, _ := moduleSource(t.TempDir(), "", p)
	if _, err := mods3.Module(h + 1); err == nil || !strings.Contains(err.Error(), "k: no_cubin") {
		t.Errorf("error %v", err)
	}
}

// The report and the root write cubins for nvdisasm into a temporary
// directory; closing the module source removes it (a framework's cubins
// are hundreds of MB, and every report used to leave them behind).
func TestModuleSourceRemovesCubinCopies(t *testing.T) {
	cubin, err := os.ReadFile("../../testdata/sass/probe/k.sm90.cubin")
	if err != nil {
		t.Fatal(err)
	}
	listing, err := os.ReadFile("../../testdata/sass/probe/k.hex.txt")
	if err != nil {
		t.Fatal(err)
	}
	fake := nvdisasmtest.New(t, cubin, listing, 0)
	bin := t.TempDir()
	if err := os.Symlink(fake.Tool, filepath.Join(bin, "nvdisasm")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("GPUPROF_CACHE_DIR", "off")

	dir := t.TempDir()
	h := profile.ModuleHash(0x5151)
	os.MkdirAll(filepath.Join(dir, ModulesDir), 0o700)
	if err := os.WriteFile(cubinFile(dir, h), cubin, 0o600); err != nil {
		t.Fatal(err)
	}
	p := profile.New("t")
	p.AddModule(profile.Module{Hash: h, SM: 90})
	const kernel = "_Z6reloadPKfPfii"
	p.AddFunc(h, kernel)
	mods, err := moduleSource(dir, "", p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mods.Module(h)
	if err != nil || m.Func(kernel) == nil {
		t.Fatalf("module from the cubin: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "gpuprof-cubins-*")); len(left) != 1 {
		t.Fatalf("cubin copies before Close: %v, want one directory", left)
	}
	mods.Close()
	if left, _ := filepath.Glob(filepath.Join(tmp, "gpuprof-cubins-*")); len(left) != 0 {
		t.Fatalf("cubin copies left after Close: %v", left)
	}
}

// A module whose instructions could not be read (no listing beside the
// profile, no --sass, no cubin for nvdisasm) is named where the report
// would otherwise say that the analysis found nothing; with advice, or
// with every module read, there is nothing to say.
func TestNoAdviceNoteNamesModulesWithoutSASS(t *testing.T) {
	p := profile.New("j")
	const h = profile.ModuleHash(0x49741b6e3558b8a3)
	p.AddModule(profile.Module{Hash: h, Name: "app.cubin"})
	p.AddFunc(h, "_Z6kernelv")
	dir := t.TempDir()
	mods, err := moduleSource(dir, "", p)
	if err != nil {
		t.Fatal(err)
	}
	defer mods.Close()
	if note := mods.noAdviceNote(nil); note != "" {
		t.Errorf("before any module was asked for: %q", note)
	}
	if _, err := mods.Module(h); err == nil {
		t.Fatalf("module %v read from an empty directory %s", h, filepath.Base(dir))
	}
	note := mods.noAdviceNote(nil)
	if !strings.Contains(note, "1 GPU module(s) without SASS") || !strings.Contains(note, "49741b6e3558b8a3") || !strings.Contains(note, "--sass") {
		t.Errorf("note %q does not name the module and the remedy", note)
	}
	if note := mods.noAdviceNote([]analysis.Advice{{Kind: "x"}}); note != "" {
		t.Errorf("with advice: %q", note)
	}
}
