package fuq

import (
	"fmt"
	"strconv"

	"github.com/tinylib/msgp/msgp"
)

//go:generate go run github.com/tinylib/msgp -file bodies.go -o bodies_gen.go -tests=false

// The bodies of HELLO, JOB, UPDATE and CANCEL are msgpack values written
// as the reference implementation (Go, vmihailenco/msgpack v2) writes them:
// structs as maps keyed by their Go field names, in declaration order; ints
// in the shortest format; a nil pointer as nil (0xc0). A JOB body is an
// array of Task, a CANCEL body an array of TaskPair. The one departure: a
// nil list is written as the empty array (0x90), where the reference writes
// nil; both sides decode either.
//
// Decoding accepts the keys in any order and skips unknown ones, as the
// reference does. The limits below keep a decoder from allocating from a
// count it has not checked: no list may hold more than 100000 elements (a
// JOB carries a worker's free processors' worth of tasks, a HELLO the tasks
// it runs) and no map more than 64 entries. ReadMessage and DecodeBody also
// walk a body before decoding it, so that no count can exceed the bytes
// that hold it.
//
//msgp:limit arrays:100000 maps:64

// Only the decoders (UnmarshalMsg) and Msgsize are generated. The encoders
// are written by hand below, because the reference writes a non-negative
// int in the unsigned formats (0xcc … 0xcf) where msgp would use the signed
// ones (0xd1 …): the two agree below 128, as in every golden vector, but
// only the hand-written encoders give the reference's bytes for every
// value. The decoders of Hello and of the JOB and CANCEL lists are
// hand-written too, to accept a nil list as the reference does and to check
// a list's count against the bytes left before allocating. The stream
// methods (EncodeMsg, DecodeMsg) are not generated: the codec works on whole
// bodies.
//
//msgp:encode ignore JobStatus JobDescription Task JobRequest StatusUpdate TaskPair Hello
//msgp:decode ignore JobStatus JobDescription Task JobRequest StatusUpdate TaskPair Hello
//msgp:marshal ignore JobStatus JobDescription Task JobRequest StatusUpdate TaskPair Hello
//msgp:unmarshal ignore JobStatus Hello
//msgp:size ignore JobStatus

// JobStatus is the state of a job at the foreman. The reference numbers
// them 0 (waiting) to 4 (cancelled); it does not name the ones between, so
// the names of 1 to 3 here are this package's own.
type JobStatus int

// The job states.
const (
	JobWaiting   JobStatus = 0 // queued, no task started yet
	JobRunning   JobStatus = 1 // some of its tasks run or wait for a worker
	JobFinished  JobStatus = 2 // every task has ended
	JobPaused    JobStatus = 3 // held: no new task is handed out
	JobCancelled JobStatus = 4 // stopped for good
)

// String returns the state's name, or "JobStatus(n)" for a number outside
// 0 … 4.
func (s JobStatus) String() string {
	switch s {
	case JobWaiting:
		return "waiting"
	case JobRunning:
		return "running"
	case JobFinished:
		return "finished"
	case JobPaused:
		return "paused"
	case JobCancelled:
		return "cancelled"
	}
	return "JobStatus(" + strconv.Itoa(int(s)) + ")"
}

// JobDescription describes a job: NumTasks tasks, numbered 1 … NumTasks,
// each run as "Command <task>" in WorkingDir with its output in LoggingDir.
type JobDescription struct {
	JobId      uint64
	Name       string
	NumTasks   int
	WorkingDir string
	LoggingDir string
	Command    string
	Status     JobStatus
}

// String describes the job as a user gave it: its name, its command and
// how many tasks run it.
func (d JobDescription) String() string {
	return fmt.Sprintf("%s: %s <task> (%d tasks)", d.Name, d.Command, d.NumTasks)
}

// Task is one task of a job: a JOB message carries a list of them, and a
// HELLO lists the ones a worker runs.
type Task struct {
	Task           int
	JobDescription JobDescription
}

// JobRequest asks the foreman, in an UPDATE, for new tasks for NumProc
// processors.
type JobRequest struct {
	NumProc int
}

// StatusUpdate is the body of UPDATE (the reference's JobStatusUpdate): the
// end of one task, and optionally a request for more work.
type StatusUpdate struct {
	JobId   uint64
	Task    int
	Success bool
	Status  string
	NewJob  *JobRequest
}

// TaskPair names one task of one job: a CANCEL message carries a list of
// them.
type TaskPair struct {
	JobId uint64
	Task  int
}

// Hello is the body of HELLO: the worker's processors and the tasks it
// runs.
type Hello struct {
	NumProcs int
	Running  []Task
}

// The limits of the msgp:limit directive above, for the hand-written
// decoders.
const (
	maxList = 100000 // elements of a list
	maxMap  = 64     // entries of a map
)

// appendInt appends v as the reference does: a non-negative value in the
// smallest of positive fixint, uint8, uint16, uint32 and uint64, a negative
// one in the smallest signed format.
func appendInt(b []byte, v int) []byte {
	if v >= 0 {
		return msgp.AppendUint64(b, uint64(v))
	}
	return msgp.AppendInt64(b, int64(v))
}

// MarshalMsg appends the msgpack encoding of z to b.
func (z *JobDescription) MarshalMsg(b []byte) ([]byte, error) {
	o := msgp.AppendMapHeader(b, 7)
	o = msgp.AppendString(o, "JobId")
	o = msgp.AppendUint64(o, z.JobId)
	o = msgp.AppendString(o, "Name")
	o = msgp.AppendString(o, z.Name)
	o = msgp.AppendString(o, "NumTasks")
	o = appendInt(o, z.NumTasks)
	o = msgp.AppendString(o, "WorkingDir")
	o = msgp.AppendString(o, z.WorkingDir)
	o = msgp.AppendString(o, "LoggingDir")
	o = msgp.AppendString(o, z.LoggingDir)
	o = msgp.AppendString(o, "Command")
	o = msgp.AppendString(o, z.Command)
	o = msgp.AppendString(o, "Status")
	o = appendInt(o, int(z.Status))
	return o, nil
}

// MarshalMsg appends the msgpack encoding of z to b.
func (z *Task) MarshalMsg(b []byte) ([]byte, error) {
	o := msgp.AppendMapHeader(b, 2)
	o = msgp.AppendString(o, "Task")
	o = appendInt(o, z.Task)
	o = msgp.AppendString(o, "JobDescription")
	return z.JobDescription.MarshalMsg(o)
}

// MarshalMsg appends the msgpack encoding of z to b.
func (z JobRequest) MarshalMsg(b []byte) ([]byte, error) {
	o := msgp.AppendMapHeader(b, 1)
	o = msgp.AppendString(o, "NumProc")
	o = appendInt(o, z.NumProc)
	return o, nil
}

// MarshalMsg appends the msgpack encoding of z to b. A nil NewJob is
// encoded as nil.
func (z *StatusUpdate) MarshalMsg(b []byte) ([]byte, error) {
	o := msgp.AppendMapHeader(b, 5)
	o = msgp.AppendString(o, "JobId")
	o = msgp.AppendUint64(o, z.JobId)
	o = msgp.AppendString(o, "Task")
	o = appendInt(o, z.Task)
	o = msgp.AppendString(o, "Success")
	o = msgp.AppendBool(o, z.Success)
	o = msgp.AppendString(o, "Status")
	o = msgp.AppendString(o, z.Status)
	o = msgp.AppendString(o, "NewJob")
	if z.NewJob == nil {
		return msgp.AppendNil(o), nil
	}
	return z.NewJob.MarshalMsg(o)
}

// MarshalMsg appends the msgpack encoding of z to b.
func (z TaskPair) MarshalMsg(b []byte) ([]byte, error) {
	o := msgp.AppendMapHeader(b, 2)
	o = msgp.AppendString(o, "JobId")
	o = msgp.AppendUint64(o, z.JobId)
	o = msgp.AppendString(o, "Task")
	o = appendInt(o, z.Task)
	return o, nil
}

// MarshalMsg appends the msgpack encoding of z to b. A nil Running is
// encoded as an empty array.
func (z *Hello) MarshalMsg(b []byte) ([]byte, error) {
	o := msgp.AppendMapHeader(b, 2)
	o = msgp.AppendString(o, "NumProcs")
	o = appendInt(o, z.NumProcs)
	o = msgp.AppendString(o, "Running")
	return appendTasks(o, z.Running)
}

// UnmarshalMsg decodes a Hello from the front of bts and returns the bytes
// after it. Keys may come in any order, unknown keys are skipped, and a nil
// or empty Running decodes as a nil slice.
func (z *Hello) UnmarshalMsg(bts []byte) ([]byte, error) {
	n, bts, err := msgp.ReadMapHeaderBytes(bts)
	if err != nil {
		return bts, msgp.WrapError(err)
	}
	if n > maxMap {
		return bts, msgp.ErrLimitExceeded
	}
	var key []byte
	for ; n > 0; n-- {
		key, bts, err = msgp.ReadMapKeyZC(bts)
		if err != nil {
			return bts, msgp.WrapError(err)
		}
		switch msgp.UnsafeString(key) {
		case "NumProcs":
			z.NumProcs, bts, err = msgp.ReadIntBytes(bts)
			if err != nil {
				return bts, msgp.WrapError(err, "NumProcs")
			}
		case "Running":
			z.Running, bts, err = readTasks(bts)
			if err != nil {
				return bts, msgp.WrapError(err, "Running")
			}
		default:
			bts, err = msgp.Skip(bts)
			if err != nil {
				return bts, msgp.WrapError(err)
			}
		}
	}
	return bts, nil
}

// appendTasks appends ts as a msgpack array (an empty one when ts is nil).
func appendTasks(b []byte, ts []Task) ([]byte, error) {
	o := msgp.AppendArrayHeader(b, uint32(len(ts)))
	var err error
	for i := range ts {
		if o, err = ts[i].MarshalMsg(o); err != nil {
			return b, err
		}
	}
	return o, nil
}

// appendTaskPairs appends ps as a msgpack array (an empty one when ps is
// nil).
func appendTaskPairs(b []byte, ps []TaskPair) ([]byte, error) {
	o := msgp.AppendArrayHeader(b, uint32(len(ps)))
	var err error
	for i := range ps {
		if o, err = ps[i].MarshalMsg(o); err != nil {
			return b, err
		}
	}
	return o, nil
}

// readListHeader reads the header of a list of structs: nil counts as an
// empty list. Each element takes at least one byte, so a count above what
// is left of bts is refused before anything is allocated, as is one above
// maxList.
func readListHeader(bts []byte) (uint32, []byte, error) {
	if msgp.IsNil(bts) {
		return 0, bts[1:], nil
	}
	n, o, err := msgp.ReadArrayHeaderBytes(bts)
	if err != nil {
		return 0, bts, err
	}
	if n > maxList {
		return 0, bts, msgp.ErrLimitExceeded
	}
	if uint64(n) > uint64(len(o)) {
		return 0, bts, msgp.ErrShortBytes
	}
	return n, o, nil
}

// readTasks decodes a list of tasks; nil and the empty list give nil.
func readTasks(bts []byte) ([]Task, []byte, error) {
	n, bts, err := readListHeader(bts)
	if err != nil || n == 0 {
		return nil, bts, err
	}
	ts := make([]Task, n)
	for i := range ts {
		if bts, err = ts[i].UnmarshalMsg(bts); err != nil {
			return nil, bts, msgp.WrapError(err, i)
		}
	}
	return ts, bts, nil
}

// readTaskPairs decodes a list of task pairs; nil and the empty list give
// nil.
func readTaskPairs(bts []byte) ([]TaskPair, []byte, error) {
	n, bts, err := readListHeader(bts)
	if err != nil || n == 0 {
		return nil, bts, err
	}
	ps := make([]TaskPair, n)
	for i := range ps {
		if bts, err = ps[i].UnmarshalMsg(bts); err != nil {
			return nil, bts, msgp.WrapError(err, i)
		}
	}
	return ps, bts, nil
}
