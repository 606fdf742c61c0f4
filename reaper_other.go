//go:build !unix

package laboro

// reap has no reaper to tell where there are no process groups.
func reap(byte, int) {}

// removeAtExit has no reaper either: the directory stays.
func removeAtExit(string) func() { return func() {} }
