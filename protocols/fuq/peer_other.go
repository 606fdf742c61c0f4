//go:build !linux

package fuq

import "net"

// checkPeer accepts every control socket where the kernel does not tell
// who serves it: the socket's directory, this user's alone, guards it.
func checkPeer(net.Conn, string) error { return nil }
