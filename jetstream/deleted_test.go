package jetstream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// A stream deleted by hand (laboro's tokens may not; a NATS user of the
// account may) loses no job: the Manager says so, makes it again, and the
// jobs in flight are published again and run; the Service's status tells
// the user.
func TestStreamDeletedJobsNotLost(t *testing.T) {
	for _, stream := range []string{"LABORO_JOBS", "LABORO_RESULTS"} {
		t.Run(stream, func(t *testing.T) {
			nc := setup(t)
			core, logs := observer.New(zap.ErrorLevel)
			cfg := Config{Logger: zap.New(zapcore.NewTee(core, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Core()))}
			m := newManager(t, nc, cfg)
			ctx := testCtx(t, time.Minute)
			// No worker yet: the jobs wait in the JOBS stream.
			results := make(chan laboro.Result, 3)
			for i := range 3 {
				go func() {
					results <- m.Run(ctx, laboro.Job{ID: fmt.Sprint("j", i), Command: fmt.Sprint("echo ", i)})
				}()
			}
			js, err := natsjs.New(nc)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 3 }, 30*time.Second, 5*time.Millisecond)

			require.NoError(t, js.DeleteStream(ctx, stream))
			require.Eventually(t, func() bool {
				return slices.ContainsFunc(m.Problems(), func(p string) bool {
					return strings.Contains(p, "stream "+stream+" deleted by hand, made again; 3 jobs in flight were published again")
				})
			}, 30*time.Second, 5*time.Millisecond, "%q", m.Problems())
			assert.Equal(t, 1, logs.FilterMessageSnippet("stream deleted by hand").Len())

			startWorker(t, nc, Config{}, 2)
			for range 3 {
				res := <-results
				require.Equal(t, laboro.StatusSucceeded, res.Status, "%s: %v", res.ID, res.Err)
				assert.Equal(t, strings.TrimPrefix(res.ID, "j")+"\n", string(output(t, res)))
			}
			// And jobs run as before.
			res := m.Run(ctx, laboro.Job{ID: "after", Command: "echo after"})
			require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
			assert.Equal(t, "after\n", string(output(t, res)))
		})
	}
}

// The Service's status names the deletion.
func TestServiceStatusTellsDeletion(t *testing.T) {
	nc := setup(t)
	startService(t, nc, Config{}, 2)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir()}}
	ctx := testCtx(t, time.Minute)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, "LABORO_JOBS"))
	var reply StatusReply
	require.Eventually(t, func() bool {
		reply, err = cl.Status(context.Background(), StatusRequest{})
		return err == nil && slices.ContainsFunc(reply.Problems, func(p string) bool {
			return strings.Contains(p, "stream LABORO_JOBS deleted by hand, made again")
		})
	}, 30*time.Second, 5*time.Millisecond, "%q", reply.Problems)
}

// A deletion whose advisory the Manager did not hear is found by its look
// at the streams, and handled the same way.
func TestStreamDeletedWithoutAdvisory(t *testing.T) {
	nc := setup(t)
	m := newManager(t, nc, Config{Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
	require.NoError(t, m.delSub.Unsubscribe()) // deaf to deletions
	require.NoError(t, nc.Flush())
	ctx := testCtx(t, time.Minute)
	done := make(chan laboro.Result, 1)
	go func() { done <- m.Run(ctx, laboro.Job{ID: "j", Command: "echo j"}) }()
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 1 }, 30*time.Second, 5*time.Millisecond)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, "LABORO_JOBS"))
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(m.Problems(), func(p string) bool {
			return strings.Contains(p, "stream LABORO_JOBS deleted by hand, made again; 1 job in flight was published again")
		})
	}, 30*time.Second, 5*time.Millisecond, "%q", m.Problems())
	startWorker(t, nc, Config{}, 1)
	res := <-done
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "j\n", string(output(t, res)))
}

// A job the server keeps in the work queue after the workers' consumer
// acknowledged it (seen once after a server restart: never delivered
// again, counted as queued forever) is removed by the Manager, and the
// jobs after it run.
func TestSweepAcknowledgedJobs(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t, time.Minute)
	start := func() (*Embedded, *nats.Conn) {
		srv, err := StartEmbedded(dir, "127.0.0.1", -1)
		require.NoError(t, err)
		nc, err := nats.Connect(srv.URL())
		require.NoError(t, err)
		return srv, nc
	}
	stop := func(srv *Embedded, nc *nats.Conn) {
		nc.Close()
		srv.Shutdown()
		srv.srv.WaitForShutdown()
	}
	// The state the server was left in: a job's message on disk, and the
	// workers' consumer's acknowledgement of it.
	srv, nc := start()
	_, _, _, err := ensure(ctx, mustJS(t, nc), Config{}.withDefaults(), true)
	require.NoError(t, err)
	_, err = mustJS(t, nc).Publish(ctx, "LABORO.jobs.stale", []byte(`{}`))
	require.NoError(t, err)
	stop(srv, nc)
	msgs := filepath.Join(dir, "jetstream", "$G", "streams", "LABORO_JOBS", "msgs")
	kept := t.TempDir()
	require.NoError(t, os.CopyFS(kept, os.DirFS(msgs)))

	srv, nc = start()
	js := mustJS(t, nc)
	jobs, err := js.Stream(ctx, "LABORO_JOBS")
	require.NoError(t, err)
	cons, err := jobs.Consumer(ctx, consumerName)
	require.NoError(t, err)
	msg, err := cons.Next(natsjs.FetchMaxWait(10 * time.Second))
	require.NoError(t, err)
	require.NoError(t, msg.DoubleAck(ctx))
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 }, 10*time.Second, 10*time.Millisecond)
	stop(srv, nc)
	require.NoError(t, os.RemoveAll(msgs))
	require.NoError(t, os.CopyFS(msgs, os.DirFS(kept)))

	srv, nc = start()
	t.Cleanup(func() { stop(srv, nc) })
	require.Equal(t, uint64(1), streamMsgs(t, nc, "LABORO_JOBS"))
	core, logs := observer.New(zap.WarnLevel)
	cfg := Config{Logger: zap.New(zapcore.NewTee(core, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Core()))}
	m := newManager(t, nc, cfg)
	// The Manager says so once it removed the job.
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("removed from the work queue").Len() > 0 },
		30*time.Second, 10*time.Millisecond)
	require.Zero(t, streamMsgs(t, nc, "LABORO_JOBS"))
	swept := logs.FilterMessageSnippet("removed from the work queue").All()
	require.Len(t, swept, 1)
	assert.Equal(t, uint64(1), swept[0].ContextMap()["to"])

	startWorker(t, nc, Config{}, 1)
	res := m.Run(ctx, laboro.Job{ID: "next", Command: "echo next"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "next\n", string(output(t, res)))
}

func mustJS(t *testing.T, nc *nats.Conn) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	return js
}
