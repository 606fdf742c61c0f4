package link

import "time"

// Clock is the time source of a Link: every interval it waits (reconnect,
// progress, ping) is an AfterFunc on it, so a test can replace real time
// with a fake one and move it forward at will.
//
// AfterFunc must not call f before it returns, and must call f at most
// once; f may run on any goroutine (the Link's callbacks never block, so a
// fake clock may run them on the goroutine that advances it).
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a function scheduled by Clock.AfterFunc. Stop prevents the
// call if it has not happened yet and reports whether it did prevent it.
type Timer interface{ Stop() bool }

// SystemClock returns the Clock of real time (time.Now and time.AfterFunc);
// it is safe for concurrent use.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
