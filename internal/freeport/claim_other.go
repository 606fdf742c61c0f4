//go:build !linux

package freeport

// claim would claim port p against the other processes that use this
// package. Here, without Linux's abstract Unix sockets, every claim
// succeeds: the check that the port is free is left.
func claim(int) bool { return true }
