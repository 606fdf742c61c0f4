package workerserver

import (
	"errors"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// committer commits the table updates of concurrent requests together: one
// transaction, so one sync of the file, for every update waiting when the
// last commit ended (group commit). An update waits for no timer, as
// bbolt's Batch does: alone, it commits at once; while a commit is under
// way, the updates that come in wait for it and go in the next one. The
// caller of the first update waiting leads that next commit, so every
// caller commits at most its own group and the one before it.
//
// An update function may run more than once (when another one of its group
// fails, each then runs alone), so it must set its results afresh on each
// call, and register what is to follow the commit with tx.OnCommit.
type committer struct {
	db *bolt.DB
	// after, if set, runs in each group's transaction after its updates
	// (not in the transactions of updates run alone after a failure).
	after   func(*bolt.Tx) error
	mu      sync.Mutex
	busy    bool          // a commit is under way or about to be
	pending []*commitTurn // waiting for the next commit
}

type commitTurn struct {
	fn   func(*bolt.Tx) error
	done chan error    // its result
	lead chan struct{} // closed when it is to lead the next commit
}

// update runs fn in a read-write transaction with those of other callers,
// and returns fn's error, or the commit's.
func (c *committer) update(fn func(*bolt.Tx) error) error {
	t := &commitTurn{fn: fn, done: make(chan error, 1), lead: make(chan struct{})}
	c.mu.Lock()
	c.pending = append(c.pending, t)
	leader := !c.busy
	c.busy = true
	c.mu.Unlock()
	if !leader {
		select {
		case err := <-t.done:
			return err
		case <-t.lead:
		}
	}
	c.mu.Lock()
	group := c.pending
	c.pending = nil
	c.mu.Unlock()
	c.commit(group)
	c.mu.Lock()
	if len(c.pending) > 0 {
		close(c.pending[0].lead)
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	return <-t.done
}

// commit runs the group's functions in one transaction; if one fails, the
// transaction is rolled back and each runs in one of its own. A function
// that returns errNoChange wrote nothing: its caller gets that error, and
// the others commit.
func (c *committer) commit(group []*commitTurn) {
	errs := make([]error, len(group))
	err := c.db.Update(func(tx *bolt.Tx) error {
		for i, t := range group {
			errs[i] = t.fn(tx)
			if errs[i] != nil && !errors.Is(errs[i], errNoChange) {
				return errs[i]
			}
		}
		if c.after != nil {
			return c.after(tx)
		}
		return nil
	})
	switch {
	case err == nil:
		for i, t := range group {
			t.done <- errs[i]
		}
	case len(group) == 1:
		group[0].done <- err
	default:
		for _, t := range group {
			t.done <- c.db.Update(t.fn)
		}
	}
}
