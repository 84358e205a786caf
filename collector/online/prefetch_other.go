//go:build !amd64 && !arm64

package online

// prefetch does nothing where no prefetch instruction is wired in.
func prefetch(addr uintptr) {}

// recAhead and prefetchRecord are prefetch.go's, with nothing to do.
const recAhead = 2

func prefetchRecord(data []byte, off uint32) {}
