//go:build !linux

package online

// prefault does nothing where MADV_POPULATE_WRITE does not exist.
func prefault[T any](s []T) {}
