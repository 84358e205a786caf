//go:build !linux

package collector

// yieldToApp does nothing off Linux, where nice is per process.
func yieldToApp(int, <-chan struct{}) {}
