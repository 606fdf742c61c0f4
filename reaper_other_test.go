//go:build !linux

package laboro_test

// The reaper's tests run on Linux only: TestMain's child roles are theirs,
// and their variables are never set elsewhere.
const (
	workerJobEnv    = "LABORO_TEST_WORKER_JOB"
	removeAtExitEnv = "LABORO_TEST_REMOVE_AT_EXIT"
)

func runWorker(string) { panic("the reaper's tests run on Linux only") }

func holdDirs(string) { panic("the reaper's tests run on Linux only") }
