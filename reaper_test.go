//go:build linux

package laboro_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/require"
)

// workerJobEnv, when set, makes the test binary a worker: an Executor that
// runs this shell script as a job, until it is killed.
const workerJobEnv = "LABORO_TEST_WORKER_JOB"

func runWorker(script string) {
	ex, err := laboro.New()
	if err != nil {
		panic(err)
	}
	if _, err := ex.Submit(context.Background(), laboro.Job{Script: script}); err != nil {
		panic(err)
	}
	select {}
}

// alive reports whether pid is a process that has not ended (a zombie
// has ended).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// A worker killed with SIGKILL leaves none of its job's processes behind:
// not the job's shell, not what the shell started, in the background or
// in the foreground.
func TestKilledWorkerLeavesNoProcess(t *testing.T) {
	dir := t.TempDir()
	pidFile, after := filepath.Join(dir, "pids"), filepath.Join(dir, "after")
	script := fmt.Sprintf("echo $$ >> %[1]s; sleep 60 & echo $! >> %[1]s; sh -c 'echo $$ >> %[1]s; sleep 60'; echo ran on >> %[2]s",
		pidFile, after)
	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(), workerJobEnv+"="+script)
	require.NoError(t, worker.Start())
	var pids []int
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(pidFile)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			require.NoError(t, err)
			pids = append(pids, pid)
		}
		return len(pids) == 3
	}, 30*time.Second, 5*time.Millisecond, "the job did not start its processes")

	// The job's group is noted for the reaper just after the job starts:
	// the few microseconds before are the one window the reaper cannot
	// cover, and the test must not kill the worker in it.
	require.Eventually(t, func() bool { return noted(worker.Process.Pid, pids[0]) }, 30*time.Second, time.Millisecond)
	require.NoError(t, worker.Process.Kill())
	worker.Wait()
	killed := time.Now()
	require.Eventually(t, func() bool {
		for _, pid := range pids {
			if alive(pid) {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "processes of the job outlived its worker: %v", pids)
	t.Logf("every process of the job was gone %v after the worker's SIGKILL", time.Since(killed).Round(time.Millisecond))
	require.NoFileExists(t, after)
}

// noted reports whether the reaper's file of process pid notes group
// pgid: the file has no name, but pid holds it open.
func noted(pid, pgid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.Contains(target, "laboro-reaper-") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		for _, line := range strings.Split(string(b), "\n") {
			if line == "+ "+strconv.Itoa(pgid) {
				return true
			}
		}
	}
	return false
}

// removeAtExitEnv, when set, makes the test binary a process that has
// the first of these directories (separated by a newline) removed at its
// exit, and the second struck off again, until it is killed.
const removeAtExitEnv = "LABORO_TEST_REMOVE_AT_EXIT"

func holdDirs(dirs string) {
	gone, kept, _ := strings.Cut(dirs, "\n")
	laboro.RemoveAtExit(gone)
	laboro.RemoveAtExit(kept)()
	fmt.Println("ready")
	select {}
}

// A directory of temporary files named with RemoveAtExit goes with its
// process, even one killed with SIGKILL; one struck off stays.
func TestRemoveAtExit(t *testing.T) {
	root := t.TempDir()
	gone, kept := filepath.Join(root, "outputs of a worker"), filepath.Join(root, "kept")
	for _, d := range []string{gone, kept} {
		require.NoError(t, os.MkdirAll(filepath.Join(d, "sub"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(d, "sub", "1.output"), []byte("x"), 0o600))
	}
	p := exec.Command(os.Args[0], "-test.run=^$")
	p.Env = append(os.Environ(), removeAtExitEnv+"="+gone+"\n"+kept)
	out, err := p.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	require.DirExists(t, gone)

	require.NoError(t, p.Process.Kill())
	p.Wait()
	require.Eventually(t, func() bool {
		_, err := os.Stat(gone)
		return os.IsNotExist(err)
	}, 10*time.Second, time.Millisecond, "the directory outlived its process")
	require.FileExists(t, filepath.Join(kept, "sub", "1.output"))
}
