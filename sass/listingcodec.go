package sass

import (
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// Stored listings: a module's or a function's nvdisasm text is kept
// zstd-compressed (in a job's output directory, the disk cache, the
// broker's module bucket).

var (
	listingEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	listingDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxListing))
)

// maxListing bounds a decoded listing (nvdisasm text of the largest
// modules is hundreds of MB).
const maxListing = 1 << 30

// EncodeListing compresses an nvdisasm listing (listings compress about
// 10x).
func EncodeListing(text []byte) []byte { return listingEnc.EncodeAll(text, nil) }

// DecodeListing reverses EncodeListing.
func DecodeListing(b []byte) ([]byte, error) {
	text, err := listingDec.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("nvdisasm listing: %w", err)
	}
	return text, nil
}
