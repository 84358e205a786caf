package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"gpuprof/profile/chunk"
)

// FileName is the merged profile's name in an output directory.
const FileName = "profile.gpuprof"

// WriteFile saves p as a zstd-compressed canonical encoding, readable by the
// user only (profiles name the user's code and hosts). The file is written
// beside its final name and renamed, so a reader never sees half a profile.
func WriteFile(path string, p *Profile) error {
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		return err
	}
	b := zw.EncodeAll(p.Encode(), nil)
	zw.Close()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadFile loads a profile saved by WriteFile; path may also be the output
// directory holding it.
func ReadFile(path string) (*Profile, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, FileName)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw, err := chunk.DecompressAll(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, fileError(b, err))
	}
	p, err := Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// zstdMagic opens every zstd frame, so every profile file.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// fileError says why b, which zstd could not decompress, is not a profile:
// not one at all, cut short (a copy or write that stopped), or damaged.
func fileError(b []byte, err error) error {
	if len(b) > 0 && len(b) < len(zstdMagic) && bytes.HasPrefix(zstdMagic, b) {
		return fmt.Errorf("profile truncated at offset %d: the file ends inside its zstd frame header", len(b))
	}
	if !bytes.HasPrefix(b, zstdMagic) {
		return errors.New("not a gpuprof profile (it does not start with a zstd frame)")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		var h zstd.Header
		size := ""
		if h.Decode(b) == nil && h.HasFCS {
			size = fmt.Sprintf(" (the profile is %d bytes uncompressed)", h.FrameContentSize)
		}
		return fmt.Errorf("profile truncated at offset %d: the file ends inside its compressed data%s", len(b), size)
	}
	return fmt.Errorf("profile damaged: its compressed data does not decompress (zstd: %v)", err)
}
