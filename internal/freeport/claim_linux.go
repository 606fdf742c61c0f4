package freeport

import (
	"errors"
	"net"
	"strconv"
	"syscall"
)

// claims are the sockets that hold this process's claims, by port, open
// until it exits.
var claims = map[int]*net.UnixListener{}

// claim claims port p for this process against the other processes that
// use this package, and reports whether it could: p is another's while a
// process that claimed it lives. A claim is a Unix socket of the abstract
// namespace named after the port, which no file stands for and which the
// kernel lets go with the process. Where no such socket can be made, every
// claim succeeds: the check that the port is free is left. Port calls it
// with mu held.
func claim(p int) bool {
	if claims[p] != nil {
		return true // this process's already
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@laboro-freeport-" + strconv.Itoa(p), Net: "unix"})
	if err != nil {
		return !errors.Is(err, syscall.EADDRINUSE)
	}
	claims[p] = ln
	return true
}
