package profile

import (
	"fmt"
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
		return nil, fmt.Errorf("%s: not a gpuprof profile (zstd: %v)", path, err)
	}
	p, err := Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
