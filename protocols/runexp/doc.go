// Package runexp is protocol 1.3 of runexp: a manager hands job scripts to
// runners that ask for them, and each runner runs them in N parallel
// workers over one connection and sends the outputs back.
//
// This file will hold the protocol notes; see codec.go for the wire.
package runexp
