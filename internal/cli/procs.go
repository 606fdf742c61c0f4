package cli

import (
	"os"
	"runtime"
)

// SpareProcessor gives the Go runtime one processor more than it has when
// jobs, run at once as processes, would keep every one, unless GOMAXPROCS
// is set; it returns a function that puts the former number back.
//
// A process job's goroutine waits for its process in a system call,
// keeping its processor until the runtime's monitor takes it back, some
// microseconds later. With every processor so kept, the goroutines that
// read, submit and report jobs wait for that monitor each time they wake,
// and the monitor wakes every 20 µs to take processors back; with one to
// spare they run at once (laboro run -workers 2 on two CPUs: 1.2 times the
// rate, with Ends; BENCHMARKS.md §13).
func SpareProcessor(jobs int) (undo func()) {
	procs := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" || jobs < procs {
		return func() {}
	}
	runtime.GOMAXPROCS(procs + 1)
	return func() { runtime.GOMAXPROCS(procs) }
}
