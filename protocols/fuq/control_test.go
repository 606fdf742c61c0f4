package fuq

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The control client decodes no answer larger than its MaxAnswer: a job of
// a thousand tasks listed whole is refused by a client of 4 KiB, with the
// limit named, and read by one of the default.
func TestControlClientBoundsAnswers(t *testing.T) {
	s := startSystem(t, &Foreman{})
	control := &Control{Foreman: s.f, Executor: s.ex}
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: control.Handler()}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })

	ctx := context.Background()
	var got map[string]string
	require.NoError(t, ControlClient{Socket: sock}.Do(ctx, "POST", "/jobs",
		Submission{Name: "big", Command: s.script("true"), Tasks: 1000}, &got))
	id := got["id"]
	require.NotEmpty(t, id)
	// Its tasks are listed once the Foreman has the job.
	require.Eventually(t, func() bool { _, ok := s.f.JobByRef(id); return ok }, 10*time.Second, time.Millisecond)

	var rep JobReport
	err = ControlClient{Socket: sock, MaxAnswer: 4096}.Do(ctx, "GET", "/jobs/"+id+"?tasks=all", nil, &rep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "answer is over 4096 bytes, the most this client reads")
	assert.NotContains(t, err.Error(), "MaxAnswer")

	require.NoError(t, ControlClient{Socket: sock}.Do(ctx, "GET", "/jobs/"+id+"?tasks=all", nil, &rep))
	require.NotNil(t, rep.Job)
	assert.Len(t, rep.Job.Tasks, 1000)
}
