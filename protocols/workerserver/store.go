package workerserver

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The master's table lives in one bbolt file:
//
//	jobs           job id → jobRow (JSON, without its history)
//	jobHistory     job id → a bucket: sequence (8 bytes, big-endian) → StatusEvent (JSON)
//	servers        server id → ServerRecord (JSON, without its history)
//	serverHistory  server id → a bucket: sequence → StatusEvent
//	cancels        server id, 0, job id → nothing: cancellations for that server's next ping
//	ids            nothing; its sequence numbers the ids the master picks (NewID)
//	open           job id → the server it was handed to ("" while Queued), for every job not ended
//	order          sequence (8 bytes, big-endian) → job id: the jobs in order of submission
//	ended          end sequence (8 bytes, big-endian) → the job's sequence (8 bytes) and id:
//	               the jobs ended, in the order they ended, with no gap in the end sequences
//
// A history is a bucket of its own so that recording a status appends one
// key instead of rewriting every status before it. The open and order
// buckets let what concerns some jobs read those jobs alone, not every job
// the table has ever run: a server's restart gives back the jobs it held,
// a reopened master submits again the jobs not ended, the user API lists
// the last jobs submitted. The ended bucket tells which jobs ended first,
// to be forgotten once the table keeps more than Master.MaxEndedJobs.
var (
	bucketJobs          = []byte("jobs")
	bucketJobHistory    = []byte("jobHistory")
	bucketServers       = []byte("servers")
	bucketServerHistory = []byte("serverHistory")
	bucketCancels       = []byte("cancels")
	bucketIDs           = []byte("ids")
	bucketOpen          = []byte("open")
	bucketOrder         = []byte("order")
	bucketEnded         = []byte("ended")
)

// jobRow is a job as stored: its record without History, its place in
// the order of submission, and the servers it was handed to.
type jobRow struct {
	JobRecord
	Seq     uint64   `json:"seq"`
	Servers []string `json:"servers,omitempty"`
}

// handedTo reports whether the job was handed to server (rows written
// before Servers was kept know only their current server).
func (r *jobRow) handedTo(server string) bool {
	return r.Server == server || slices.Contains(r.Servers, server)
}

// openDB opens or creates the table at path, waiting at most timeout for
// another process's lock on the file.
func openDB(path string, timeout time.Duration) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("workerserver: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		// A table written before the open and order buckets were kept
		// gets them once.
		index := tx.Bucket(bucketOpen) == nil || tx.Bucket(bucketOrder) == nil
		// One written before the ended bucket was kept gets it once.
		indexEnded := tx.Bucket(bucketEnded) == nil
		for _, name := range [][]byte{bucketJobs, bucketJobHistory, bucketServers, bucketServerHistory, bucketCancels, bucketIDs, bucketOpen, bucketOrder, bucketEnded} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if index {
			if err := indexJobs(tx); err != nil {
				return err
			}
		}
		if indexEnded {
			return indexEndedJobs(tx)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("workerserver: open %s: %w", path, err)
	}
	return db, nil
}

// closedDB reports whether err is that of a transaction on a table that
// was closed meanwhile.
func closedDB(err error) bool { return errors.Is(err, berrors.ErrDatabaseNotOpen) }

func getJob(tx *bolt.Tx, id string) (*jobRow, error) {
	b := tx.Bucket(bucketJobs).Get([]byte(id))
	if b == nil {
		return nil, nil
	}
	row := new(jobRow)
	if err := json.Unmarshal(b, row); err != nil {
		return nil, fmt.Errorf("workerserver: stored job %q: %w", id, err)
	}
	return row, nil
}

func putJob(tx *bolt.Tx, row *jobRow) error {
	h := row.History
	row.History = nil
	b, err := json.Marshal(row)
	row.History = h
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketJobs).Put([]byte(row.ID), b); err != nil {
		return err
	}
	open := tx.Bucket(bucketOpen)
	if Final(row.Status) {
		if !has(open, []byte(row.ID)) {
			return nil // it had ended already
		}
		if err := open.Delete([]byte(row.ID)); err != nil {
			return err
		}
		return appendEnded(tx, row.Seq, []byte(row.ID))
	}
	if v := open.Get([]byte(row.ID)); v != nil && string(v) == row.Server {
		return nil // unchanged: its page is not rewritten
	}
	return open.Put([]byte(row.ID), []byte(row.Server))
}

// indexJobs fills the open and order buckets from the jobs bucket.
func indexJobs(tx *bolt.Tx) error {
	open, order := tx.Bucket(bucketOpen), tx.Bucket(bucketOrder)
	return tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
		var row jobRow
		if err := json.Unmarshal(v, &row); err != nil {
			return fmt.Errorf("workerserver: stored job %q: %w", k, err)
		}
		if err := order.Put(binary.BigEndian.AppendUint64(nil, row.Seq), slices.Clone(k)); err != nil {
			return err
		}
		if Final(row.Status) {
			return nil
		}
		return open.Put(slices.Clone(k), []byte(row.Server))
	})
}

// has reports whether bucket b has key k.
func has(b *bolt.Bucket, k []byte) bool {
	found, _ := b.Cursor().Seek(k)
	return bytes.Equal(found, k)
}

// appendEnded adds the job of sequence seq and id to the ended bucket, as
// the last to end.
func appendEnded(tx *bolt.Tx, seq uint64, id []byte) error {
	ended := tx.Bucket(bucketEnded)
	n, err := ended.NextSequence()
	if err != nil {
		return err
	}
	v := make([]byte, 0, 8+len(id))
	v = binary.BigEndian.AppendUint64(v, seq)
	return ended.Put(binary.BigEndian.AppendUint64(nil, n), append(v, id...))
}

// indexEndedJobs fills the ended bucket from the order and open buckets:
// the jobs of a table written before it was kept are taken as having
// ended in the order they were submitted.
func indexEndedJobs(tx *bolt.Tx) error {
	open, jobs := tx.Bucket(bucketOpen), tx.Bucket(bucketJobs)
	return tx.Bucket(bucketOrder).ForEach(func(k, id []byte) error {
		if len(k) != 8 || has(open, id) || jobs.Get(id) == nil {
			return nil
		}
		return appendEnded(tx, binary.BigEndian.Uint64(k), id)
	})
}

// forgetEnded removes from the table the jobs that ended first, record,
// history and place in the indexes, until it keeps at most keep ended
// jobs, or it has removed most, or the next one is pinned (its Run has
// yet to read its end). It returns how many it removed.
func forgetEnded(tx *bolt.Tx, keep, most int, pinned func(id string) bool) (int, error) {
	c := tx.Bucket(bucketEnded).Cursor()
	first, _ := c.First()
	last, _ := c.Last()
	if first == nil {
		return 0, nil
	}
	if len(first) != 8 || len(last) != 8 {
		return 0, errors.New("workerserver: stored ended index: a key is not 8 bytes")
	}
	// The end sequences have no gap: the bucket is appended to, and
	// removed from its front only.
	count := binary.BigEndian.Uint64(last) - binary.BigEndian.Uint64(first) + 1
	jobs, hist, order := tx.Bucket(bucketJobs), tx.Bucket(bucketJobHistory), tx.Bucket(bucketOrder)
	n := 0
	for ; count > uint64(max(keep, 0)) && n < most; count-- {
		_, v := c.First()
		if len(v) < 8 {
			return n, errors.New("workerserver: stored ended index: a value is shorter than 8 bytes")
		}
		id := v[8:]
		if pinned != nil && pinned(string(id)) {
			break
		}
		if err := jobs.Delete(id); err != nil {
			return n, err
		}
		if err := hist.DeleteBucket(id); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return n, err
		}
		if err := order.Delete(v[:8]); err != nil {
			return n, err
		}
		if err := c.Delete(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// openJobIDs returns the ids of the jobs not ended whose server (""
// while Queued) keep accepts; every one if keep is nil.
func openJobIDs(tx *bolt.Tx, keep func(server []byte) bool) [][]byte {
	var ids [][]byte
	tx.Bucket(bucketOpen).ForEach(func(k, v []byte) error {
		if keep == nil || keep(v) {
			ids = append(ids, slices.Clone(k))
		}
		return nil
	})
	return ids
}

// newJobSeq returns the next number in the order of submission, and
// gives it to job id.
func newJobSeq(tx *bolt.Tx, id string) (uint64, error) {
	seq, err := tx.Bucket(bucketJobs).NextSequence()
	if err != nil {
		return 0, err
	}
	return seq, tx.Bucket(bucketOrder).Put(binary.BigEndian.AppendUint64(nil, seq), []byte(id))
}

// newJobID returns the next number of the ids bucket's sequence that no
// job has as its id, in decimal.
func newJobID(tx *bolt.Tx) (string, error) {
	for {
		n, err := tx.Bucket(bucketIDs).NextSequence()
		if err != nil {
			return "", err
		}
		id := strconv.FormatUint(n, 10)
		if tx.Bucket(bucketJobs).Get([]byte(id)) == nil {
			return id, nil
		}
	}
}

// allJobs returns every job of the table, in order of submission.
func allJobs(tx *bolt.Tx, withHistory bool) ([]JobRecord, error) {
	var rows []jobRow
	err := tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
		var row jobRow
		if err := json.Unmarshal(v, &row); err != nil {
			return fmt.Errorf("workerserver: stored job %q: %w", k, err)
		}
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return records(tx, rows, withHistory)
}

// openJobs returns the jobs not ended (Queued or Processing), in order of
// submission, with their history.
func openJobs(tx *bolt.Tx) ([]JobRecord, error) {
	return indexedJobs(tx, openJobIDs(tx, nil), bucketOpen)
}

// lastJobs returns the last n jobs submitted, in order of submission,
// with their history.
func lastJobs(tx *bolt.Tx, n int) ([]JobRecord, error) {
	var ids [][]byte
	c := tx.Bucket(bucketOrder).Cursor()
	for k, id := c.Last(); k != nil && len(ids) < n; k, id = c.Prev() {
		ids = append(ids, id)
	}
	return indexedJobs(tx, ids, bucketOrder)
}

// indexedJobs returns the jobs of ids, which the index bucket gave, in
// order of submission, with their history.
func indexedJobs(tx *bolt.Tx, ids [][]byte, index []byte) ([]JobRecord, error) {
	rows := make([]jobRow, 0, len(ids))
	for _, id := range ids {
		row, err := getJob(tx, string(id))
		if err != nil {
			return nil, err
		}
		if row == nil {
			return nil, fmt.Errorf("workerserver: job %q is in the %s index but not in the table", id, index)
		}
		rows = append(rows, *row)
	}
	return records(tx, rows, true)
}

// records sorts rows in order of submission and returns their records.
func records(tx *bolt.Tx, rows []jobRow, withHistory bool) ([]JobRecord, error) {
	slices.SortFunc(rows, func(a, b jobRow) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	codes, err := offeredCodes(tx)
	if err != nil {
		return nil, err
	}
	recs := make([]JobRecord, len(rows))
	for i := range rows {
		recs[i] = rows[i].JobRecord
		recs[i].Unoffered = recs[i].Status == JobQueued && !codes.offer(recs[i].Worker)
		if withHistory {
			if recs[i].History, err = history(tx, bucketJobHistory, recs[i].ID); err != nil {
				return nil, err
			}
		}
	}
	return recs, nil
}

// offered is the worker codes that the servers offer.
type offered struct {
	all   bool // a server that never listed its codes offers all
	codes map[string]bool
}

func (o offered) offer(code string) bool { return o.all || o.codes[code] }

// serverCache keeps what the servers' records say, so that queueing a job
// does not read the record of every server the table has known (offered),
// nor the end of a job the record of its server (record). It is emptied
// by every transaction that writes a server's record (changed), at once
// and again once it commits; a value read is stored only if no such
// transaction began since before the transaction that read it, so a value
// found before a change can never be stored after it. (A read-only
// transaction that began before a commit sees the table as it was: what it
// stores before that commit's handler runs, the handler empties.)
type serverCache struct {
	mu      sync.Mutex
	gen     uint64 // changes so far
	valid   bool   // o is current
	o       offered
	servers map[string]*ServerRecord // by id; nil for one the table lacks
}

// offered returns the codes offered as tx sees them. It stores what it
// reads only for a write transaction, whose view is the latest.
func (c *serverCache) offered(tx *bolt.Tx) (offered, error) {
	c.mu.Lock()
	o, valid, gen := c.o, c.valid, c.gen
	c.mu.Unlock()
	if valid {
		return o, nil
	}
	o, err := offeredCodes(tx)
	if err == nil && tx.Writable() {
		tx.OnCommit(func() {
			c.mu.Lock()
			if c.gen == gen {
				c.o, c.valid = o, true
			}
			c.mu.Unlock()
		})
	}
	return o, err
}

// record returns the record of server id as the table has it (nil if it
// has none), without its history. Callers must not change it.
func (c *serverCache) record(db *bolt.DB, id string) (*ServerRecord, error) {
	c.mu.Lock()
	rec, ok := c.servers[id]
	gen := c.gen // before the read's transaction begins
	c.mu.Unlock()
	if ok {
		return rec, nil
	}
	err := db.View(func(tx *bolt.Tx) (err error) {
		rec, err = getServer(tx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.gen == gen {
		if c.servers == nil {
			c.servers = map[string]*ServerRecord{}
		}
		c.servers[id] = rec
	}
	c.mu.Unlock()
	return rec, nil
}

// changed is called in a transaction that writes a server's record.
func (c *serverCache) changed(tx *bolt.Tx) {
	c.drop()
	tx.OnCommit(c.drop)
}

func (c *serverCache) drop() {
	c.mu.Lock()
	c.gen++
	c.valid = false
	clear(c.servers)
	c.mu.Unlock()
}

// offeredCodes returns the codes offered by the servers that are not
// Stopping or Offline (see Master.Handler).
func offeredCodes(tx *bolt.Tx) (offered, error) {
	o := offered{codes: map[string]bool{}}
	err := tx.Bucket(bucketServers).ForEach(func(k, v []byte) error {
		var rec ServerRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("workerserver: stored server %q: %w", k, err)
		}
		if rec.Status == ServerStopping || rec.Status == ServerOffline {
			return nil
		}
		if !listsCodes(&rec) {
			o.all = true
			return nil
		}
		for _, c := range rec.Startup.Workers {
			o.codes[c.Code] = true
		}
		return nil
	})
	return o, err
}

func getServer(tx *bolt.Tx, id string) (*ServerRecord, error) {
	b := tx.Bucket(bucketServers).Get([]byte(id))
	if b == nil {
		return nil, nil
	}
	rec := new(ServerRecord)
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("workerserver: stored server %q: %w", id, err)
	}
	return rec, nil
}

func putServer(tx *bolt.Tx, rec *ServerRecord) error {
	h := rec.History
	rec.History = nil
	b, err := json.Marshal(rec)
	rec.History = h
	if err != nil {
		return err
	}
	return tx.Bucket(bucketServers).Put([]byte(rec.ID), b)
}

func allServers(tx *bolt.Tx) ([]ServerRecord, error) {
	var recs []ServerRecord
	err := tx.Bucket(bucketServers).ForEach(func(k, v []byte) error {
		var rec ServerRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("workerserver: stored server %q: %w", k, err)
		}
		h, err := history(tx, bucketServerHistory, rec.ID)
		if err != nil {
			return err
		}
		rec.History = h
		recs = append(recs, rec)
		return nil
	})
	return recs, err
}

// appendEvent adds ev to the history of id in the history bucket named top.
func appendEvent(tx *bolt.Tx, top []byte, id string, ev StatusEvent) error {
	b, err := tx.Bucket(top).CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return err
	}
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	v, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), v); err != nil {
		return err
	}
	if seq <= MaxHistory {
		return nil
	}
	// The events before the last MaxHistory go: one an append, once
	// the history is full.
	oldest := binary.BigEndian.AppendUint64(nil, seq-MaxHistory)
	c := b.Cursor()
	for k, _ := c.First(); k != nil && bytes.Compare(k, oldest) <= 0; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// history returns every event of id in the history bucket named top, in
// the order they were appended.
func history(tx *bolt.Tx, top []byte, id string) ([]StatusEvent, error) {
	b := tx.Bucket(top).Bucket([]byte(id))
	if b == nil {
		return nil, nil
	}
	var evs []StatusEvent
	err := b.ForEach(func(_, v []byte) error {
		var ev StatusEvent
		if err := json.Unmarshal(v, &ev); err != nil {
			return fmt.Errorf("workerserver: stored history of %q: %w", id, err)
		}
		evs = append(evs, ev)
		return nil
	})
	return evs, err
}

func cancelKey(server, job string) []byte {
	k := make([]byte, 0, len(server)+1+len(job))
	k = append(k, server...)
	k = append(k, 0)
	return append(k, job...)
}

// putCancel asks server to cancel job at its next ping.
func putCancel(tx *bolt.Tx, server, job string) error {
	return tx.Bucket(bucketCancels).Put(cancelKey(server, job), []byte{})
}

func deleteCancel(tx *bolt.Tx, server, job string) error {
	return tx.Bucket(bucketCancels).Delete(cancelKey(server, job))
}

// takeCancels removes and returns the jobs server is to cancel.
// hasCancels tells whether jobs to cancel wait for server.
func hasCancels(tx *bolt.Tx, server string) (bool, error) {
	prefix := append([]byte(server), 0)
	k, _ := tx.Bucket(bucketCancels).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix), nil
}

func takeCancels(tx *bolt.Tx, server string) ([]string, error) {
	prefix := append([]byte(server), 0)
	c := tx.Bucket(bucketCancels).Cursor()
	var ids []string
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		ids = append(ids, string(k[len(prefix):]))
		if err := c.Delete(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
