package laboro

import (
	"strconv"
	"testing"
)

// TestIDSource checks the assigned ids through several batches and every
// carry into a new digit up to 100,000.
func TestIDSource(t *testing.T) {
	var s idSource
	for n := 1; n <= 100_000; n++ {
		if got, want := s.next(), "job_"+strconv.Itoa(n); got != want {
			t.Fatalf("id %d: got %q, want %q", n, got, want)
		}
	}
}

// BenchmarkIDSource measures an assigned id, which the Executor makes
// under its lock.
func BenchmarkIDSource(b *testing.B) {
	s := idSource{last: 1_000_000}
	b.ReportAllocs()
	for range b.N {
		s.next()
	}
}
