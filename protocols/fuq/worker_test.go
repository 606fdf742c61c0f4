package fuq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// scripted is a foreman played by the test, over TCP, for one Worker.
type scripted struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	ran  chan error // the Worker's Run
}

// startScripted starts w against a listener of the test's and accepts its
// connection.
func startScripted(t *testing.T, w *Worker) *scripted {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	w.Addr = ln.Addr().String()
	s := &scripted{t: t, ran: make(chan error, 1)}
	returned := make(chan struct{})
	go func() { s.ran <- w.Run(ctx); close(returned) }()
	t.Cleanup(func() {
		cancel()
		<-returned
	})
	s.conn, err = ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { s.conn.Close() })
	s.conn.SetDeadline(time.Now().Add(20 * time.Second))
	s.r = bufio.NewReader(s.conn)
	return s
}

func (s *scripted) read() Message {
	s.t.Helper()
	m, err := ReadMessage(s.r, 0)
	require.NoError(s.t, err)
	return m
}

func (s *scripted) write(m Message) {
	s.t.Helper()
	b, err := m.AppendBinary(nil)
	require.NoError(s.t, err)
	_, err = s.conn.Write(b)
	require.NoError(s.t, err)
}

// gone reports whether a process has ended: it no longer exists, or it is
// a zombie that its new parent has not reaped yet.
func gone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	// The state follows the parenthesised command name.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

// A worker with one processor answers a JOB of two tasks with ERROR(no
// procs), runs a JOB of one, and reports it with UPDATE; its log has the
// reference's mode, 0666 less the umask; STOP(1) leaves it no processor,
// and it ends.
func TestWorkerAgainstScriptedForeman(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	s := startScripted(t, &Worker{Procs: 1, SpoolDir: t.TempDir()})

	hello := s.read()
	assert.Equal(t, Header{Type: TypeHello, Seq: 0, Arg0: hello.Arg0}, hello.Header)
	assert.Equal(t, 1, hello.Hello.NumProcs)
	s.write(Message{Header: Header{Type: TypeOK, Seq: 0, Arg0: PackOK(1, 0)}})

	dir := t.TempDir()
	desc := JobDescription{JobId: 7, Name: "j", NumTasks: 2, WorkingDir: dir, LoggingDir: dir, Command: "/bin/echo"}
	s.write(Message{Header: Header{Type: TypeJob, Seq: 1}, Tasks: []Task{{Task: 1, JobDescription: desc}, {Task: 2, JobDescription: desc}}})
	assert.Equal(t, Header{Type: TypeError, Code: CodeNoProcs, Seq: 1}, s.read().Header, "two tasks, one processor")

	s.write(Message{Header: Header{Type: TypeJob, Seq: 3}, Tasks: []Task{{Task: 2, JobDescription: desc}}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 3, Arg0: PackOK(0, 1)}, s.read().Header)
	up := s.read()
	assert.Equal(t, TypeUpdate, up.Type)
	assert.Equal(t, uint32(4), up.Seq, "the worker's next even number after 3")
	assert.Equal(t, StatusUpdate{JobId: 7, Task: 2, Success: true, Status: "done"}, *up.Update)
	s.write(Message{Header: Header{Type: TypeOK, Seq: 4, Arg0: PackOK(1, 0)}})
	fi, err := os.Stat(filepath.Join(dir, "j_2.log"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm(), "0666 less the umask 027")

	s.write(Message{Header: Header{Type: TypeCancel, Seq: 5}, Cancel: []TaskPair{{JobId: 7, Task: 1}}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 5, Arg0: PackOK(1, 0)}, s.read().Header, "cancelling a task it does not run")
	s.write(Message{Header: Header{Type: TypeStop, Seq: 7, Arg0: 1}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 7, Arg0: PackOK(0, 0)}, s.read().Header)
	select {
	case err := <-s.ran:
		assert.ErrorIs(t, err, ErrStopped, "no processor left and nothing running")
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not end")
	}
}

// A job whose logging directory does not exist yet gets it made, as a
// user who names a new one on submit expects: the task runs and its log is
// there.
func TestWorkerMakesLoggingDir(t *testing.T) {
	s := startScripted(t, &Worker{Procs: 1, SpoolDir: t.TempDir()})
	s.read()
	s.write(Message{Header: Header{Type: TypeOK, Seq: 0, Arg0: PackOK(1, 0)}})

	logDir := filepath.Join(t.TempDir(), "new", "logs")
	desc := JobDescription{JobId: 3, Name: "n", NumTasks: 1, WorkingDir: t.TempDir(), LoggingDir: logDir, Command: "/bin/echo"}
	s.write(Message{Header: Header{Type: TypeJob, Seq: 1}, Tasks: []Task{{Task: 1, JobDescription: desc}}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 1, Arg0: PackOK(0, 1)}, s.read().Header)
	up := s.read()
	require.Equal(t, TypeUpdate, up.Type)
	assert.Equal(t, StatusUpdate{JobId: 3, Task: 1, Success: true, Status: "done"}, *up.Update)
	log, err := os.ReadFile(filepath.Join(logDir, "n_1.log"))
	require.NoError(t, err)
	assert.Equal(t, "1\n", string(log))
	s.write(Message{Header: Header{Type: TypeOK, Seq: up.Seq, Arg0: PackOK(1, 0)}})
	s.write(Message{Header: Header{Type: TypeStop, Seq: 3, Arg0: 1}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 3, Arg0: PackOK(0, 0)}, s.read().Header)
	<-s.ran
}

// CANCEL kills a task's whole process group: {JobId, Task} one task, and
// {JobId, -1} (what the reference foreman sends) every task of the job.
// Each cancelled task is reported by an UPDATE that says it failed (the
// reference foreman frees a processor only on UPDATE), and leaves no log.
func TestWorkerCancel(t *testing.T) {
	s := startScripted(t, &Worker{Procs: 3, SpoolDir: t.TempDir()})
	s.read()
	s.write(Message{Header: Header{Type: TypeOK, Seq: 0, Arg0: PackOK(3, 0)}})

	dir := t.TempDir()
	task := filepath.Join(dir, "task.sh")
	// The task's shell and its child write their pids, then wait.
	script := fmt.Sprintf("#!/bin/sh\nsleep 300 &\necho $$ $! > %s/pids-$FUQ_JOB-$1.tmp\nmv %[1]s/pids-$FUQ_JOB-$1.tmp %[1]s/pids-$FUQ_JOB-$1\nwait\n", dir)
	require.NoError(t, os.WriteFile(task, []byte(script), 0o755))
	job := func(id uint64) JobDescription {
		// The job's id reaches the script through a wrapper of its own.
		wrapper := filepath.Join(dir, fmt.Sprintf("job%d.sh", id))
		require.NoError(t, os.WriteFile(wrapper, fmt.Appendf(nil, "#!/bin/sh\nFUQ_JOB=%d exec %s \"$@\"\n", id, task), 0o755))
		return JobDescription{JobId: id, Name: fmt.Sprintf("j%d", id), NumTasks: 2, WorkingDir: dir, LoggingDir: dir, Command: wrapper}
	}
	j7, j8 := job(7), job(8)
	s.write(Message{Header: Header{Type: TypeJob, Seq: 1}, Tasks: []Task{{Task: 1, JobDescription: j7}, {Task: 2, JobDescription: j7}, {Task: 1, JobDescription: j8}}})
	assert.Equal(t, Header{Type: TypeOK, Seq: 1, Arg0: PackOK(0, 3)}, s.read().Header)
	pids := map[string][]int{}
	for _, name := range []string{"7-1", "7-2", "8-1"} {
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(filepath.Join(dir, "pids-"+name))
			if err != nil {
				return false
			}
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				require.NoError(t, err)
				pids[name] = append(pids[name], pid)
			}
			return true
		}, 10*time.Second, 5*time.Millisecond, "task %s did not start", name)
	}

	// Every task of job 7.
	s.write(Message{Header: Header{Type: TypeCancel, Seq: 3}, Cancel: []TaskPair{{JobId: 7, Task: -1}}})
	ok := s.read()
	assert.Equal(t, TypeOK, ok.Type)
	assert.Equal(t, uint32(3), ok.Seq)
	var updates []StatusUpdate
	for range 2 {
		up := s.read()
		require.Equal(t, TypeUpdate, up.Type)
		updates = append(updates, *up.Update)
		s.write(Message{Header: Header{Type: TypeOK, Seq: up.Seq, Arg0: PackOK(1, 1)}})
	}
	assert.ElementsMatch(t, []int{1, 2}, []int{updates[0].Task, updates[1].Task})
	for _, u := range updates {
		assert.Equal(t, uint64(7), u.JobId)
		assert.False(t, u.Success)
		assert.Contains(t, u.Status, "error encountered: ")
		assert.Contains(t, u.Status, "cancelled")
	}
	for _, name := range []string{"7-1", "7-2"} {
		for _, pid := range pids[name] {
			require.Eventually(t, func() bool { return gone(pid) }, 10*time.Second, 5*time.Millisecond,
				"process %d of task %s still runs", pid, name)
		}
	}
	for _, pid := range pids["8-1"] {
		assert.False(t, gone(pid), "job 8 runs on")
	}

	// One task.
	s.write(Message{Header: Header{Type: TypeCancel, Seq: 7}, Cancel: []TaskPair{{JobId: 8, Task: 1}}})
	ok = s.read()
	assert.Equal(t, TypeOK, ok.Type)
	up := s.read()
	require.Equal(t, TypeUpdate, up.Type)
	assert.Equal(t, TaskPair{JobId: 8, Task: 1}, TaskPair{JobId: up.Update.JobId, Task: up.Update.Task})
	assert.False(t, up.Update.Success)
	s.write(Message{Header: Header{Type: TypeOK, Seq: up.Seq, Arg0: PackOK(3, 0)}})
	for _, pid := range pids["8-1"] {
		require.Eventually(t, func() bool { return gone(pid) }, 10*time.Second, 5*time.Millisecond)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasSuffix(e.Name(), ".log"), "a cancelled task leaves no log: %s", e.Name())
	}
}

// A worker that starts reads the UPDATEs an earlier run spooled, each no
// further than its header allows: a file whose header announces a body
// over MaxBody (here 256 MiB long, most of it a hole) is set aside as .bad
// without its body being read, and the good ones are kept in order.
func TestWorkerSpoolReadBounded(t *testing.T) {
	dir := t.TempDir()
	s := &workerState{w: &Worker{SpoolDir: dir, MaxBody: 1 << 20}, log: zap.NewNop()}
	first, err := s.spool(StatusUpdate{JobId: 7, Task: 1, Success: true})
	require.NoError(t, err)
	huge, err := Message{Header: Header{Type: TypeUpdate}, Update: &StatusUpdate{JobId: 7, Task: 2}}.AppendBinary(nil)
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(huge[12:], 200<<20) // the body's length in the header
	bad := filepath.Join(dir, "00000000000000000002-7-2.update")
	require.NoError(t, os.WriteFile(bad, huge, 0o600))
	require.NoError(t, os.Truncate(bad, 256<<20))
	last, err := s.spool(StatusUpdate{JobId: 7, Task: 3, Success: false, Status: "exit status 1"})
	require.NoError(t, err)
	require.NoError(t, os.Rename(first, filepath.Join(dir, "00000000000000000001-7-1.update")))
	require.NoError(t, os.Rename(last, filepath.Join(dir, "00000000000000000003-7-3.update")))

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	require.NoError(t, s.loadSpool())
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated to read the spool")
	require.Len(t, s.spooled, 2)
	assert.Equal(t, 1, s.spooled[0].update.Task)
	assert.Equal(t, 3, s.spooled[1].update.Task)
	assert.Equal(t, "exit status 1", s.spooled[1].update.Status)
	_, err = os.Stat(bad + ".bad")
	assert.NoError(t, err, "the file over the limit is set aside")
}

// A task's log stays in its job's LoggingDir, whatever name a foreman
// gives the job.
func TestKeepLogRefusesANameOutOfItsDirectory(t *testing.T) {
	task := Task{JobDescription: JobDescription{Name: "../../escape", LoggingDir: t.TempDir()}, Task: 1}
	assert.ErrorContains(t, keepLog(nil, task, 0o644), `job name "../../escape"`)
}
