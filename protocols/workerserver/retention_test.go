package workerserver

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// keep sets a Master's MaxEndedJobs.
func keep(n int) func(*Master) { return func(m *Master) { m.MaxEndedJobs = n } }

// runToEnd runs job id through s1 to its Done, whose data is its id, and
// checks what its Run returns.
func (f *fixture) runToEnd(id string) {
	f.t.Helper()
	res := make(chan laboro.Result, 1)
	go func() { res <- f.m.Run(context.Background(), NewJob(id, "w", nil)) }()
	order, _ := f.pingForJob("s1")
	require.Equal(f.t, id, order.JobID)
	f.jobStatus("s1", id, JobDone, id)
	r := <-res
	require.Equal(f.t, laboro.StatusSucceeded, r.Status, "%v", r.Err)
	out, err := r.Output.ReadAll()
	require.NoError(f.t, err)
	require.Equal(f.t, strconv.Quote(id), string(out))
}

// tableIDs returns the ids of every job the table has, in order of
// submission, and checks that the indexes agree.
func (f *fixture) tableIDs() []string {
	f.t.Helper()
	all := recordIDs(f.m.Jobs())
	require.Equal(f.t, all, recordIDs(f.m.LastJobs(len(all)+10)), "the order index and the table differ")
	return all
}

func TestForgetsJobsEndedFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "master.db")
	f := openFixture(t, file, keep(3))
	f.online("s1", "w")
	for i := 1; i <= 6; i++ {
		f.runToEnd(strconv.Itoa(i))
	}
	require.Equal(t, []string{"4", "5", "6"}, f.tableIDs(), "the three jobs ended last stay")
	_, ok := f.m.Job("1")
	require.False(t, ok)
	require.ErrorIs(t, f.m.Cancel("2"), ErrUnknownJob)
	resp, err := http.Get(f.srv.URL + "/api/jobs/3")
	require.NoError(t, err)
	code, a := readAnswer(t, resp)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, a.Error, `unknown job "3": never submitted, or forgotten after it ended (the table keeps the last 3 jobs to end)`)

	// A worker's cache replays the end of a job forgotten: answered with
	// success, so that the cache drains, and recorded nowhere.
	before := f.snapshot()
	code, a = f.post(DefaultPaths.Job+"2", form("s1", JobDone, "2"))
	require.Equal(t, http.StatusOK, code, "%+v", a)
	require.NoError(t, a.Err())
	require.JSONEq(t, `{"jobId":"2","status":""}`, string(a.Data))
	require.Equal(t, before, f.snapshot())

	// A Run of a forgotten id runs it again.
	f.runToEnd("1")
	require.Equal(t, []string{"5", "6", "1"}, f.tableIDs())

	// A job ended outside a grouped commit (Cancel of a queued one) is
	// counted at the next commit, here a ping's.
	cancelled := make(chan laboro.Result, 1)
	go func() { cancelled <- f.m.Run(context.Background(), NewJob("7", "w", nil)) }()
	f.waitStatus("7", JobQueued)
	require.NoError(t, f.m.Cancel("7"))
	require.Equal(t, laboro.StatusKilled, (<-cancelled).Status)
	f.ping("s1")
	require.Equal(t, []string{"6", "1", "7"}, f.tableIDs())

	// Jobs not ended are never forgotten, however old.
	held := make(chan laboro.Result, 1)
	go func() { held <- f.m.Run(context.Background(), NewJob("held", "w", nil)) }()
	order, _ := f.pingForJob("s1")
	require.Equal(t, "held", order.JobID)
	for _, id := range []string{"8", "9", "10"} {
		f.runToEnd(id)
	}
	require.Equal(t, []string{"held", "8", "9", "10"}, f.tableIDs())
	f.close()
	require.ErrorIs(t, (<-held).Err, ErrMasterClosed)

	// Opened with a lower bound, the table forgets at once; with none, it
	// keeps every job.
	g := openFixture(t, file, keep(1))
	require.Equal(t, []string{"held", "10"}, g.tableIDs())
	require.Equal(t, []string{"held"}, recordIDs(g.m.Unfinished()))
	g.online("s1", "w")
	g.close()
	h := openFixture(t, file, keep(-1))
	h.online("s1", "w")
	for _, id := range []string{"11", "12"} {
		h.runToEnd(id)
	}
	require.Equal(t, []string{"held", "10", "11", "12"}, h.tableIDs(), "a negative MaxEndedJobs keeps every job")
}

func TestTableWithoutEndedIndex(t *testing.T) {
	file := filepath.Join(t.TempDir(), "master.db")
	f := openFixture(t, file, keep(-1))
	f.online("s1", "w")
	for _, id := range []string{"1", "2", "3"} {
		f.runToEnd(id)
	}
	queued := make(chan laboro.Result, 1)
	go func() { queued <- f.m.Run(context.Background(), NewJob("4", "w", nil)) }()
	f.waitStatus("4", JobQueued)
	f.close()
	require.ErrorIs(t, (<-queued).Err, ErrMasterClosed)

	// A table written before the ended index was kept.
	db, err := bolt.Open(file, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketEnded) }))
	require.NoError(t, db.Close())

	g := openFixture(t, file, keep(1))
	require.Equal(t, []string{"3", "4"}, g.tableIDs(), "its ended jobs are taken in order of submission")
	require.Equal(t, []string{"4"}, recordIDs(g.m.Unfinished()))
}

// TestForgetSparesPinned checks that a job whose Run has yet to read its
// end is not forgotten, nor any that ended after it, until it is read.
func TestForgetSparesPinned(t *testing.T) {
	db, err := openDB(filepath.Join(t.TempDir(), "master.db"), DefaultLockTimeout)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, id := range []string{"a", "b", "c"} {
			seq, err := newJobSeq(tx, id)
			if err != nil {
				return err
			}
			row := &jobRow{Seq: seq, JobRecord: JobRecord{ID: id, Worker: "w", Status: JobQueued}}
			if err := putJob(tx, row); err != nil {
				return err
			}
			if err := appendEvent(tx, bucketJobHistory, id, StatusEvent{Status: JobQueued}); err != nil {
				return err
			}
			row.Status = JobDone
			if err := putJob(tx, row); err != nil {
				return err
			}
			// A row put again once final is not counted again.
			if err := putJob(tx, row); err != nil {
				return err
			}
		}
		return nil
	}))
	forget := func(keep int, pinned func(string) bool) (n int, left []string) {
		require.NoError(t, db.Update(func(tx *bolt.Tx) (err error) {
			if n, err = forgetEnded(tx, keep, 10, pinned); err != nil {
				return err
			}
			return tx.Bucket(bucketJobs).ForEach(func(k, _ []byte) error {
				left = append(left, string(k))
				return nil
			})
		}))
		return n, left
	}
	n, left := forget(0, func(id string) bool { return id == "a" })
	require.Equal(t, 0, n)
	require.Equal(t, []string{"a", "b", "c"}, left)
	n, left = forget(1, func(id string) bool { return id == "c" })
	require.Equal(t, 2, n)
	require.Equal(t, []string{"c"}, left)
	n, left = forget(0, nil)
	require.Equal(t, 1, n)
	require.Empty(t, left)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketOrder, bucketEnded, bucketOpen} {
			if k, _ := tx.Bucket(b).Cursor().First(); k != nil {
				return errors.New(string(b) + " is not empty")
			}
		}
		if k, _ := tx.Bucket(bucketJobHistory).Cursor().First(); k != nil {
			return errors.New("a history is left")
		}
		return nil
	}))
}

func TestHistoryKeepsTheLastStatuses(t *testing.T) {
	db, err := openDB(filepath.Join(t.TempDir(), "master.db"), DefaultLockTimeout)
	require.NoError(t, err)
	defer db.Close()
	for _, top := range [][]byte{bucketJobHistory, bucketServerHistory} {
		var evs []StatusEvent
		require.NoError(t, db.Update(func(tx *bolt.Tx) error {
			for i := range MaxHistory + 5 {
				if err := appendEvent(tx, top, "x", StatusEvent{Status: strconv.Itoa(i)}); err != nil {
					return err
				}
			}
			evs, err = history(tx, top, "x")
			return err
		}))
		require.Len(t, evs, MaxHistory, "%s", top)
		require.Equal(t, "5", evs[0].Status, "%s: the oldest went first", top)
		require.Equal(t, strconv.Itoa(MaxHistory+4), evs[len(evs)-1].Status, "%s", top)
	}
}
