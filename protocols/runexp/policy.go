package runexp

// Verdict is a Policy's answer for a runner that asks for a job.
type Verdict uint8

const (
	// Allow gives the runner a job.
	Allow Verdict = iota
	// Hold answers ATENDI: the runner waits and asks again later.
	Hold
	// Ban answers ELIRI: the runner gets no more jobs; its results are
	// still taken.
	Ban
)

// recentWindow is how many of a runner's latest outcomes a Record keeps.
const recentWindow = 10

// Record is what a Policy knows of a runner (of all its connections, by
// host name).
type Record struct {
	Host   string
	Done   int      // results received from it
	Failed int      // of which failures
	Recent []Status // its latest outcomes, at most 10, oldest first
	Out    int      // jobs out at this connection now
}

// Policy decides, at each PETO, whether a runner may run a job. It is
// called from the runners' goroutines, so it must be safe for concurrent
// use.
type Policy interface {
	Judge(r Record) Verdict
}

// BanPolicy is the reference manager's --ban: a runner whose success rate
// is under 60% after at least 10 jobs is banned (ELIRI); one with more
// than 2 failures among its last 10 is held (ATENDI) while it still has
// jobs out, so that their outcomes can be weighed. A held runner with no
// job out is let run again: waiting could not change its record.
type BanPolicy struct{}

// Judge applies the rule.
func (BanPolicy) Judge(r Record) Verdict {
	if r.Done >= 10 && float64(r.Done-r.Failed) < 0.6*float64(r.Done) {
		return Ban
	}
	failures := 0
	for _, s := range r.Recent {
		if s == Failure {
			failures++
		}
	}
	if failures > 2 && r.Out > 0 {
		return Hold
	}
	return Allow
}

// record is a host's history, kept by the Manager.
type record struct {
	done, failed int
	recent       [recentWindow]Status
	n, next      int // filled slots; the slot of the next outcome
}

func (r *record) add(s Status) {
	r.done++
	if s == Failure {
		r.failed++
	}
	r.recent[r.next] = s
	r.next = (r.next + 1) % recentWindow
	r.n = min(r.n+1, recentWindow)
}

func (r *record) view(host string, out int) Record {
	v := Record{Host: host, Done: r.done, Failed: r.failed, Out: out, Recent: make([]Status, 0, r.n)}
	for i := range r.n {
		v.Recent = append(v.Recent, r.recent[(r.next-r.n+i+recentWindow)%recentWindow])
	}
	return v
}
