package profile

// SetParallel lowers the thresholds of the parallel encode and decode paths
// so that small test profiles take them; it returns a function restoring
// the defaults.
func SetParallel(min, chunk int) (restore func()) {
	oldMin, oldChunk := parMin, parChunk
	parMin, parChunk = min, chunk
	return func() { parMin, parChunk = oldMin, oldChunk }
}
