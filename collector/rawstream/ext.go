package rawstream

// Extension frames this package decodes (kinds from FirstExtension up,
// which older decoders skip: docs/wire.md, "Extensions").

// KindModuleHash is MODULE_HASH: the module whose MODULE frame follows was
// trimmed of its bytes (gpuprof capture trim); it names the content hash
// its bytes had, so that listings and caches keyed by that hash still
// serve it.
const KindModuleHash Kind = FirstExtension

// ModuleHash says which bytes a trimmed module had.
type ModuleHash struct {
	ModuleID   uint64
	ContentKey uint64
	Hash       uint64 // xxhash64 of the module's bytes (the collector's content hash)
	Size       uint32 // their count
}

func (*ModuleHash) Kind() Kind { return KindModuleHash }

// decodedExtension reports whether the decoder returns frames of kind k
// (others of FirstExtension and up are skipped).
func decodedExtension(k Kind) bool { return k == KindModuleHash }

func parseExtension(kind Kind, p *pr) Frame {
	switch kind {
	case KindModuleHash:
		return &ModuleHash{ModuleID: p.u64("module_id"), ContentKey: p.u64("content_key"), Hash: p.u64("hash"), Size: p.u32("size")}
	}
	return nil
}

func appendExtension(p pw, f Frame) (pw, bool) {
	switch f := f.(type) {
	case *ModuleHash:
		return p.u64(f.ModuleID).u64(f.ContentKey).u64(f.Hash).u32(f.Size), true
	}
	return p, false
}
