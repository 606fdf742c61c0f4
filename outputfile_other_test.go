//go:build !linux

package laboro

import "testing"

// viaProc skips: only Linux links output files through /proc.
func viaProc(tb testing.TB) { tb.Skip("output files are linked through /proc on Linux only") }
