package fuq

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A foreman played by the test, over TCP: a worker with one processor
// answers a JOB of two tasks with ERROR(no procs), runs a JOB of one, and
// reports it with UPDATE; STOP(1) leaves it no processor, and it ends.
func TestWorkerAgainstScriptedForeman(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &Worker{Addr: ln.Addr().String(), Procs: 1, SpoolDir: t.TempDir()}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	conn, err := ln.Accept()
	require.NoError(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	read := func() Message {
		m, err := ReadMessage(r, 0)
		require.NoError(t, err)
		return m
	}
	write := func(m Message) {
		b, err := m.AppendBinary(nil)
		require.NoError(t, err)
		_, err = conn.Write(b)
		require.NoError(t, err)
	}

	hello := read()
	assert.Equal(t, Header{Type: TypeHello, Seq: 0, Arg0: hello.Arg0}, hello.Header)
	assert.Equal(t, 1, hello.Hello.NumProcs)
	write(Message{Header: Header{Type: TypeOK, Seq: 0, Arg0: PackOK(1, 0)}})

	dir := t.TempDir()
	desc := JobDescription{JobId: 7, Name: "j", NumTasks: 2, WorkingDir: dir, LoggingDir: dir, Command: "/bin/echo"}
	write(Message{Header: Header{Type: TypeJob, Seq: 1}, Tasks: []Task{{Task: 1, JobDescription: desc}, {Task: 2, JobDescription: desc}}})
	assert.Equal(t, Header{Type: TypeError, Code: CodeNoProcs, Seq: 1}, read().Header, "two tasks, one processor")

	write(Message{Header: Header{Type: TypeJob, Seq: 3}, Tasks: []Task{{Task: 2, JobDescription: desc}}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 3, Arg0: PackOK(0, 1)}, read().Header)
	up := read()
	assert.Equal(t, TypeUpdate, up.Type)
	assert.Equal(t, uint32(4), up.Seq, "the worker's next even number after 3")
	assert.Equal(t, StatusUpdate{JobId: 7, Task: 2, Success: true, Status: "done"}, *up.Update)
	write(Message{Header: Header{Type: TypeOK, Seq: 4, Arg0: PackOK(1, 0)}})

	write(Message{Header: Header{Type: TypeCancel, Seq: 5}, Cancel: []TaskPair{{JobId: 7, Task: 1}}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 5, Arg0: PackOK(1, 0)}, read().Header, "cancelling a task it does not run")
	write(Message{Header: Header{Type: TypeStop, Seq: 7, Arg0: 1}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 7, Arg0: PackOK(0, 0)}, read().Header)
	select {
	case err := <-ran:
		assert.ErrorIs(t, err, ErrStopped, "no processor left and nothing running")
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not end")
	}
}
