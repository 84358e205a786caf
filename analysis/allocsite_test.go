package analysis

import (
	"testing"

	"gpuprof/profile"
)

// An allocation's calling context names each frame by its function and
// line where symbolised, and by its module and offset where not (a
// stripped library's frames), never by nothing.
func TestAllocSiteNamesUnsymbolisedFrames(t *testing.T) {
	p := profile.New("j")
	main := p.Child(profile.RootID, profile.Frame{Kind: profile.KindHostFrame, Module: "/bin/app", Function: "main", File: "app.cc", Line: 12})
	lib := p.Child(main.ID, profile.Frame{Kind: profile.KindHostFrame, Module: "/usr/lib/libc10_cuda.so", Offset: 0x2f4cb})
	p.Objects[1] = &profile.DataObject{ID: 1, Context: lib.ID, Size: 4096, Count: 1}
	x := NewIndex(p)
	if got, want := x.AllocSite(1), "libc10_cuda.so+0x2f4cb <- main app.cc:12"; got != want {
		t.Errorf("AllocSite = %q, want %q", got, want)
	}
	if got, want := objectName(x, 1), "the 4096-byte array allocated at libc10_cuda.so+0x2f4cb"; got != want {
		t.Errorf("objectName = %q, want %q", got, want)
	}
}
