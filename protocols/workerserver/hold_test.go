package workerserver

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/laboro-go/laboro"
)

// heldPing is a ping sent in the background, for a master that holds it.
func (f *fixture) heldPing(server string) <-chan PingData {
	answer := make(chan PingData, 1)
	go func() {
		var pd PingData
		if code, a := f.post(DefaultPaths.Ping+server, form(server, "", nil)); code == 200 && a.Err() == nil {
			json.Unmarshal(a.Data, &pd)
		}
		answer <- pd
	}()
	return answer
}

// awaitHeld waits until server's ping waits in the master.
func (f *fixture) awaitHeld(server string) {
	f.t.Helper()
	s := f.m.current()
	require.Eventually(f.t, func() bool { return s.holding.Load() == 1 }, 10*time.Second, time.Millisecond,
		"%s's ping is held", server)
}

// A ping that finds no job waits for one: a job that comes in line is
// handed to it at once, not at the server's next ping; a job to cancel
// at that server, the server's leaving, and Release end the wait too.
func TestHeldPing(t *testing.T) {
	f := openFixture(t, t.TempDir()+"/master.db", func(m *Master) { m.Hold = time.Hour })
	ex := f.executor()
	f.online("s1", "w")

	answer := f.heldPing("s1")
	f.awaitHeld("s1")
	h, err := ex.Submit(context.Background(), NewJob("j", "w", nil))
	require.NoError(t, err)
	pd := <-answer // an hour's hold: only the job ends it
	require.NotNil(t, pd.Job)
	assert.Equal(t, "j", pd.Job.JobID)
	f.jobStatus("s1", "j", JobProcessing, nil)

	answer = f.heldPing("s1") // a free slot: it asks for more
	f.awaitHeld("s1")
	require.NoError(t, f.m.Cancel("j"))
	pd = <-answer
	assert.Nil(t, pd.Job)
	assert.Equal(t, []string{"j"}, pd.CancelJobs, "the cancel is sent at once")
	f.jobStatus("s1", "j", JobCancelled, ErrorData{Error: ErrorDetail{Name: "Cancelled", Message: "cancelled"}})
	assert.Equal(t, laboro.StatusKilled, wait(t, h).Status)

	answer = f.heldPing("s1")
	f.awaitHeld("s1")
	f.serverStatus("s1", ServerStopping, nil)
	assert.Nil(t, (<-answer).Job, "a server on its way out gets no job")

	f.online("s1", "w")
	answer = f.heldPing("s1")
	f.awaitHeld("s1")
	f.m.Release()
	assert.Nil(t, (<-answer).Job)
	pd, _ = f.ping("s1") // released: it answers at once, or the test times out
	assert.Nil(t, pd.Job)
}
