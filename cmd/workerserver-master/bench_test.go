package main

import (
	"testing"
)

// BenchmarkAPISubmit measures the user API's job submission, one POST
// /api/jobs after the other to a workerserver-master process with no
// worker: each answers once its job is in the master's table.
func BenchmarkAPISubmit(b *testing.B) {
	s := newSystem(b)
	s.startMaster()
	b.ResetTimer()
	for i := range b.N {
		s.submit("", i)
	}
}
