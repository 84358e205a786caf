//go:build !amd64 && !arm64

package online

// prefetch does nothing where no prefetch instruction is wired in.
func prefetch(addr uintptr) {}

const recAhead = 2

func prefetchRecord(data []byte, off uint32) {}
