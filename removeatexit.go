package laboro

// RemoveAtExit has dir, a directory of this process's temporary files,
// removed with all it holds when this process ends, however it ends: even
// killed with SIGKILL, when no deferred call or signal handler of its own
// runs. (On Unix, the process's reaper, the small shell that also kills
// the process groups of its jobs, does it once the process is gone.)
// Call the returned function when dir is removed, or is to be kept
// after all: it strikes dir off. Elsewhere than on Unix, RemoveAtExit does
// nothing, and the returned function neither.
func RemoveAtExit(dir string) (forget func()) { return removeAtExit(dir) }
