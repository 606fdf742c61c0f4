//go:build !linux

package laboro

// scriptInMemory reports false: scripts are written to files.
func scriptInMemory(string) (string, func(), bool) { return "", nil, false }
