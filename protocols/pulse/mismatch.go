package pulse

import (
	"net"
	"strconv"
	"sync"
)

// A controller and a worker that speak different numberings read each
// other's enums wrong, without a decoding error most of the time: a
// REGISTER of the later numbering (2) is a FETCH_ME in the spec's, and the
// spec's answer UNKNOWN_ID (2) an UNKNOWN_TYPE in the later one. Both sides
// look for what makes sense only in the other numbering and log it with a
// hint, once per peer.

// other returns the numbering that is not n.
func (n Numbering) other() Numbering {
	if n == SpecNumbering {
		return LaterNumbering
	}
	return SpecNumbering
}

// The names of the enums' wire numbers, by numbering.
var (
	pulseTypeNames = [2][]string{
		SpecNumbering:  {"REGISTER", "OK", "FETCH_ME", "SHUTDOWN"},
		LaterNumbering: {"INVALID", "OK", "REGISTER", "FETCH_ME", "SHUTDOWN"},
	}
	controllerErrorNames = [2][]string{
		SpecNumbering:  {"OK", "UNKNOWN_TYPE", "UNKNOWN_ID", "FAILED"},
		LaterNumbering: {"INVALID", "OK", "UNKNOWN_TYPE", "UNKNOWN_ID", "FAILED"},
	}
)

// wireName returns the name of the wire number w in names[n], or says
// that n has none.
func wireName(names [2][]string, n Numbering, w int32) string {
	if n <= LaterNumbering && w >= 0 && int(w) < len(names[n]) {
		return names[n][w]
	}
	return "unknown (" + strconv.Itoa(int(w)) + ")"
}

// knownIn reports whether the wire number w of an enum, whose names are
// names, has a meaning in n: not INVALID, not past the last value.
func knownIn(names [2][]string, n Numbering, w int32) bool {
	return n <= LaterNumbering && w >= 0 && int(w) < len(names[n]) && !(n == LaterNumbering && w == 0)
}

// numberingHint tells the side that speaks n what to do about a peer
// (the "worker" or the "controller") that seems to speak the other
// numbering.
func numberingHint(n Numbering, peer string) string {
	if n == SpecNumbering {
		return "the " + peer + " seems to speak the later numbering (INVALID = 0): speak it too " +
			"(-later; Codec.Numbering = LaterNumbering)"
	}
	return "the " + peer + " seems to speak the spec numbering (PULSE_REGISTER = 0): speak it too " +
		"(drop -later; Codec.Numbering = SpecNumbering)"
}

// onceSet remembers keys, to log something once per key. It forgets
// them all once it holds maxOnceKeys, so that a stream of peers cannot
// make it grow without bound (they are logged again after that). Its zero
// value is empty and ready; it is safe for concurrent use.
type onceSet struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

const maxOnceKeys = 1024

// first reports whether key is new, and remembers it.
func (o *onceSet) first(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[key]; ok {
		return false
	}
	if o.seen == nil || len(o.seen) >= maxOnceKeys {
		o.seen = map[string]struct{}{}
	}
	o.seen[key] = struct{}{}
	return true
}

// peerKey names the process at the other end of a Unix connection (by its
// pid, where the system tells it), so that a peer's mistakes are logged
// once: "pid 1234", or "" when the system does not tell.
func peerKey(conn net.Conn) string {
	if pid, ok := peerPID(conn); ok {
		return "pid " + strconv.Itoa(pid)
	}
	return ""
}
