package workerserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport/link"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// benchMaster is a Master with its Executor and HTTP server.
type benchMaster struct {
	m    *Master
	ex   *laboro.Executor
	srv  *httptest.Server
	file string // the table
}

func newBenchMaster(b *testing.B, opts ...func(*Master)) *benchMaster {
	return newBenchMasterOf(b, map[string]string{"w1": "pw"}, opts...)
}

// newBenchMasterOf is newBenchMaster with the servers (id: password) the
// master knows.
func newBenchMasterOf(b *testing.B, servers map[string]string, opts ...func(*Master)) *benchMaster {
	return newBenchMasterAt(b, filepath.Join(b.TempDir(), "table.db"), servers, opts...)
}

// newBenchMasterAt is newBenchMasterOf with the table at file.
func newBenchMasterAt(b *testing.B, file string, servers map[string]string, opts ...func(*Master)) *benchMaster {
	m := &Master{Servers: servers, OutputDir: b.TempDir()}
	for _, o := range opts {
		o(m)
	}
	if err := m.Open(file); err != nil {
		b.Fatal(err)
	}
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(4096), laboro.WithConcurrency(4096), laboro.WithBufferSize(4096))
	if err != nil {
		b.Fatal(err)
	}
	return &benchMaster{m: m, ex: ex, srv: httptest.NewServer(m.Handler()), file: file}
}

func (bm *benchMaster) close() {
	bm.m.Release()
	bm.srv.Close()
	bm.m.Close()
	bm.ex.Close()
}

// runWorker runs a Worker of 4 slots for bm with the codes of dir, pinging
// every ping (0: the default); the returned func stops it.
func (bm *benchMaster) runWorker(b *testing.B, dir string, ping time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Worker{URL: bm.srv.URL, ServerID: "w1", Password: "pw", CodeDir: dir, CacheDir: b.TempDir(),
		Concurrency: 4, Ping: ping}
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	return func() { cancel(); wg.Wait() }
}

// echoCode returns a directory of one worker code, echo: a trivial
// executable (cat: the params back as the result).
func echoCode(b *testing.B) string {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "echo"), []byte("#!/bin/sh\ncat\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	return dir
}

// submit submits n jobs and returns their handles.
func (bm *benchMaster) submit(b *testing.B, n int) []*laboro.Handle {
	hs := make([]*laboro.Handle, n)
	for i := range hs {
		h, err := bm.ex.Submit(context.Background(), NewJob(fmt.Sprintf("j%d", i), "echo", nil))
		if err != nil {
			b.Fatal(err)
		}
		hs[i] = h
	}
	return hs
}

func waitAll(b *testing.B, hs []*laboro.Handle) {
	for _, h := range hs {
		res, err := h.Wait(context.Background())
		if err != nil || res.Status != laboro.StatusSucceeded {
			b.Fatal(res.Status, err, res.Err)
		}
		res.Output.Close()
	}
}

// BenchmarkJobs measures jobs through a master and one worker running 4
// at once, over loopback HTTP, for a trivial executable (cat: the params
// back as the result), against the same executable and input spawned by
// the core at concurrency 4.
func BenchmarkJobs(b *testing.B) {
	codes := echoCode(b)
	b.Run("core", func(b *testing.B) {
		ex, err := laboro.New(laboro.WithOutputDir(b.TempDir()), laboro.WithPoolSize(4), laboro.WithConcurrency(4), laboro.WithBufferSize(4096))
		if err != nil {
			b.Fatal(err)
		}
		defer ex.Close()
		hs := make([]*laboro.Handle, b.N)
		for i := range hs {
			if hs[i], err = ex.Submit(context.Background(), laboro.Job{Args: []string{filepath.Join(codes, "echo")}, Stdin: strings.NewReader("{}")}); err != nil {
				b.Fatal(err)
			}
		}
		waitAll(b, hs)
	})
	b.Run("workerserver", func(b *testing.B) {
		bm := newBenchMaster(b)
		defer bm.close()
		bm.steady(b, codes)
	})
	// The same with a table at its bound: every job that ends has the
	// master forget the one that ended first (with b.N over 100).
	b.Run("workerserver/keep-ended=100", func(b *testing.B) {
		bm := newBenchMaster(b, func(m *Master) { m.MaxEndedJobs = 100 })
		defer bm.close()
		bm.steady(b, codes)
	})
	// The same on a table that has run 100,000 jobs (its default bound).
	b.Run("workerserver/ended=100000", func(b *testing.B) {
		file := filepath.Join(b.TempDir(), "table.db")
		fillTable(b, file, 100000)
		bm := newBenchMasterAt(b, file, map[string]string{"w1": "pw"})
		defer bm.close()
		bm.steady(b, codes)
	})
	// The same with 200 more servers in the table, online and idle: a
	// fleet whose other machines have no free slot, or that came and went.
	b.Run("workerserver/idle-servers=200", func(b *testing.B) {
		servers := map[string]string{"w1": "pw"}
		for i := range 200 {
			servers[fmt.Sprintf("idle%d", i)] = "pw"
		}
		bm := newBenchMasterOf(b, servers)
		defer bm.close()
		for id := range servers {
			if id != "w1" {
				bm.online(b, id)
			}
		}
		bm.steady(b, codes)
	})
}

// steady runs b.N echo jobs through a worker of the codes in dir, pinging
// every 20 ms when idle. One job runs before the timer: the worker is known
// to the master and the figure is the steady rate.
func (bm *benchMaster) steady(b *testing.B, dir string) {
	defer bm.runWorker(b, dir, 20*time.Millisecond)()
	h, err := bm.ex.Submit(context.Background(), NewJob("warm", "echo", nil))
	if err != nil {
		b.Fatal(err)
	}
	waitAll(b, []*laboro.Handle{h})
	b.ResetTimer()
	waitAll(b, bm.submit(b, b.N))
	b.StopTimer()
	if fi, err := os.Stat(bm.file); err == nil {
		b.ReportMetric(float64(fi.Size())/1e6, "table-MB")
	}
}

// online has server id say Connecting, then Online, listing the code
// echo, as a worker does when it starts.
func (bm *benchMaster) online(b *testing.B, id string) {
	startup, err := json.Marshal(Startup{Startup: true, Version: "1.0.0", Workers: []WorkerCode{{Code: "echo", Version: "1"}}})
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range []url.Values{
		{FieldStatus: {ServerConnecting}},
		{FieldStatus: {ServerOnline}, FieldData: {string(startup)}},
	} {
		st.Set(FieldServerID, id)
		st.Set(FieldPassword, bm.m.Servers[id])
		resp, err := http.PostForm(bm.srv.URL+DefaultPaths.Status+id, st)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("server %s: %s", id, resp.Status)
		}
	}
}

// BenchmarkPickup measures how soon an idle worker runs a new job: one op
// is one trivial job, submitted once the last one's result is in, from
// Submit to its result, with a worker that pings at the reference's 30 s
// (its default) and a master that holds its ping (the default Hold); core
// is the same job spawned by a local Executor.
func BenchmarkPickup(b *testing.B) {
	codes := echoCode(b)
	one := func(b *testing.B, ex *laboro.Executor, job func(i int) laboro.Job) {
		for i := range b.N {
			h, err := ex.Submit(context.Background(), job(i))
			if err != nil {
				b.Fatal(err)
			}
			waitAll(b, []*laboro.Handle{h})
		}
	}
	b.Run("core", func(b *testing.B) {
		ex, err := laboro.New(laboro.WithOutputDir(b.TempDir()), laboro.WithPoolSize(4), laboro.WithConcurrency(4))
		if err != nil {
			b.Fatal(err)
		}
		defer ex.Close()
		one(b, ex, func(int) laboro.Job {
			return laboro.Job{Args: []string{filepath.Join(codes, "echo")}, Stdin: strings.NewReader("{}")}
		})
	})
	b.Run("workerserver", func(b *testing.B) {
		bm := newBenchMaster(b)
		defer bm.close()
		defer bm.runWorker(b, codes, 0)()
		// The worker is there once its first job ran.
		one(b, bm.ex, func(i int) laboro.Job { return NewJob(fmt.Sprintf("warm%d", i), "echo", nil) })
		b.ResetTimer()
		one(b, bm.ex, func(i int) laboro.Job { return NewJob(fmt.Sprintf("j%d", i), "echo", nil) })
	})
}

// BenchmarkBurst measures how soon an idle worker of 4 slots runs 4 jobs
// that come at once: one op is 4 trivial jobs submitted together, from the
// first Submit to the last result, the next op once they are all in.
func BenchmarkBurst(b *testing.B) {
	codes := echoCode(b)
	bm := newBenchMaster(b)
	defer bm.close()
	defer bm.runWorker(b, codes, 0)()
	burst := func(name string) {
		hs := make([]*laboro.Handle, 4)
		for i := range hs {
			h, err := bm.ex.Submit(context.Background(), NewJob(fmt.Sprintf("%s-%d", name, i), "echo", nil))
			if err != nil {
				b.Fatal(err)
			}
			hs[i] = h
		}
		waitAll(b, hs)
	}
	burst("warm") // the worker is there once its first jobs ran
	b.ResetTimer()
	for i := range b.N {
		burst(strconv.Itoa(i))
	}
}

// BenchmarkReplay measures how long a worker takes, once the master is
// back, to deliver 500 Done statuses it cached while the master was away
// (one operation: all 500, until every job's Run has returned).
func BenchmarkReplay(b *testing.B) {
	const n = 500
	for range b.N {
		b.StopTimer()
		bm := newBenchMaster(b)
		hs := bm.submit(b, n)
		w := &Worker{URL: bm.srv.URL, ServerID: "w1", Password: "pw", Logger: nil, Paths: DefaultPaths, Client: http.DefaultClient}
		w.Logger = zap.NewNop()
		// The jobs go out to w1, as if it had pinged for them.
		for i := 0; i < n; {
			var pd PingData
			if err := w.post(context.Background(), DefaultPaths.Ping+"w1", nil, &pd); err != nil {
				b.Fatal(err)
			}
			if pd.Job != nil {
				i++
			}
		}
		// Their Done statuses wait in a cache, written while the master
		// was away.
		cache := b.TempDir()
		down, err := link.New(unreachable{}, link.Config{CacheDir: cache})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			down.Send(context.Background(), link.Message{Key: fmt.Sprintf("j%d", i), Final: true, Body: statusBody(JobDone, map[string]int{"n": i})})
		}
		down.Stop(context.Background())
		up, err := link.New(&masterAPI{w: w}, link.Config{CacheDir: cache})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		up.Start()
		waitAll(b, hs)
		b.StopTimer()
		up.Stop(context.Background())
		bm.close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "statuses/s")
}

// unreachable is a master that is never there.
type unreachable struct{}

var errDown = errors.New("master down")

func (unreachable) Hello(context.Context, bool) error        { return errDown }
func (unreachable) Online(context.Context) error             { return errDown }
func (unreachable) Send(context.Context, link.Message) error { return errDown }
func (unreachable) Goodbye(context.Context) error            { return errDown }

// fillTable writes to a new table at path ended jobs that ended (Done,
// with their history) and one job Processing at server w1, as a master
// that has run them leaves it.
func fillTable(b *testing.B, path string, ended int) {
	db, err := openDB(path, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	const perTx = 10000
	for start := 0; start <= ended; start += perTx {
		err := db.Update(func(tx *bolt.Tx) error {
			for i := start; i < min(start+perTx, ended+1); i++ {
				id := strconv.Itoa(i + 1)
				seq, err := newJobSeq(tx, id)
				if err != nil {
					return err
				}
				// Processing, then (but the last) Done, as the master writes it.
				row := &jobRow{JobRecord: JobRecord{ID: id, Worker: "echo", Status: JobProcessing,
					Server: "w1", Created: now, Updated: now}, Seq: seq}
				if err := putJob(tx, row); err != nil {
					return err
				}
				if i < ended {
					row.Status, row.Data = JobDone, json.RawMessage(`{"n":1}`)
					if err := putJob(tx, row); err != nil {
						return err
					}
				}
				for _, st := range []string{JobQueued, JobProcessing, row.Status} {
					if err := appendEvent(tx, bucketJobHistory, row.ID, StatusEvent{Status: st, At: now, Server: "w1"}); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLargeTable measures, on a table of a master that has run many
// jobs, what is not about those ended jobs: a server's restart (its
// Connecting and Online, which put back in line the job it held), and a
// restarted master finding the jobs to submit again (Open, Unfinished).
func BenchmarkLargeTable(b *testing.B) {
	for _, ended := range []int{1000, 100000} {
		path := filepath.Join(b.TempDir(), "table.db")
		fillTable(b, path, ended)
		b.Run(fmt.Sprintf("server-restart/ended=%d", ended), func(b *testing.B) {
			m := &Master{Servers: map[string]string{"w1": "pw"}, OutputDir: b.TempDir()}
			if err := m.Open(path); err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			srv := httptest.NewServer(m.Handler())
			defer srv.Close()
			w := &Worker{URL: srv.URL, ServerID: "w1", Password: "pw", Paths: DefaultPaths, Client: srv.Client()}
			for b.Loop() {
				for _, st := range []string{ServerConnecting, ServerOnline} {
					form := url.Values{FieldStatus: {st}, FieldData: {"{}"}}
					if err := w.post(context.Background(), DefaultPaths.Status+"w1", form, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("list/ended=%d", ended), func(b *testing.B) {
			m := &Master{OutputDir: b.TempDir()}
			if err := m.Open(path); err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			for b.Loop() {
				if got := m.LastJobs(DefaultListLimit); len(got) != min(DefaultListLimit, ended+1) {
					b.Fatalf("listed %d jobs", len(got))
				}
			}
		})
		// The first Open of a table written before its indexes were kept
		// makes them: once, reading every job.
		b.Run(fmt.Sprintf("index/ended=%d", ended), func(b *testing.B) {
			old := filepath.Join(b.TempDir(), "old.db")
			for b.Loop() {
				b.StopTimer()
				copyTableWithoutIndexes(b, path, old)
				b.StartTimer()
				db, err := openDB(old, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				db.Close()
			}
		})
		// A master opened on the table with a lower MaxEndedJobs forgets
		// the jobs beyond it at once.
		b.Run(fmt.Sprintf("forget-to-100/ended=%d", ended), func(b *testing.B) {
			copied := filepath.Join(b.TempDir(), "copy.db")
			for b.Loop() {
				b.StopTimer()
				data, err := os.ReadFile(path)
				if err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(copied, data, 0o600); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				m := &Master{OutputDir: b.TempDir(), MaxEndedJobs: 100}
				if err := m.Open(copied); err != nil {
					b.Fatal(err)
				}
				if got := m.LastJobs(1000); len(got) != 101 {
					b.Fatalf("%d jobs left", len(got))
				}
				m.Close()
			}
		})
		b.Run(fmt.Sprintf("unfinished/ended=%d", ended), func(b *testing.B) {
			for b.Loop() {
				m := &Master{OutputDir: b.TempDir()}
				if err := m.Open(path); err != nil {
					b.Fatal(err)
				}
				if got := m.Unfinished(); len(got) != 1 || got[0].ID != strconv.Itoa(ended+1) {
					b.Fatalf("unfinished: %d jobs", len(got))
				}
				m.Close()
			}
		})
	}
}

// copyTableWithoutIndexes copies the table at from to to, without the
// buckets that index it, as the master wrote it before it kept them.
func copyTableWithoutIndexes(b *testing.B, from, to string) {
	data, err := os.ReadFile(from)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		b.Fatal(err)
	}
	db, err := bolt.Open(to, 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		return errors.Join(tx.DeleteBucket(bucketOpen), tx.DeleteBucket(bucketOrder), tx.DeleteBucket(bucketEnded))
	})
	if err != nil {
		b.Fatal(err)
	}
}
