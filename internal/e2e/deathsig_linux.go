package e2e

import "syscall"

// sysProcAttr has the kernel kill a started binary when the test process
// ends without its cleanups: a test binary that times out (its panic runs
// no t.Cleanup) or is killed from outside would otherwise leave servers
// running, holding ports and files that a later test run needs. (The
// signal follows the thread that started the process, and Go ends no
// thread while a goroutine not locked to it runs on it.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
