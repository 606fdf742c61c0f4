package fuq

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Messages for the tests. A request is built without its number (the Seq
// gives it one); sqAt numbers it as it goes on the wire. Arg0 tells the
// requests of a test apart.

func sqMsg(t Type, arg0 uint32) Message { return Message{Header: Header{Type: t, Arg0: arg0}} }

func sqAt(m Message, seq uint32) Message {
	m.Seq = seq
	return m
}

var sqHello = sqMsg(TypeHello, 0)

func sqUpdate(n uint32) Message { return sqMsg(TypeUpdate, n) }
func sqJob(n uint32) Message    { return sqMsg(TypeJob, n) }
func sqCancel(n uint32) Message { return sqMsg(TypeCancel, n) }
func sqStop(n uint32) Message   { return sqMsg(TypeStop, n) }

var sqStopNow = sqMsg(TypeStop, StopImmediate)

func sqOK(seq uint32) Message { return sqAt(sqMsg(TypeOK, 0), seq) }

func sqError(c Code, seq uint32) Message {
	return Message{Header: Header{Type: TypeError, Code: c, Seq: seq}}
}

func sqReset(seq, arg0 uint32) Message { return sqAt(sqMsg(TypeReset, arg0), seq) }

// The actions expected.

func sqSend(m Message) Action         { return Action{Kind: ActSend, Msg: m} }
func sqDeliver(m Message) Action      { return Action{Kind: ActRequest, Msg: m} }
func sqReplied(m, req Message) Action { return Action{Kind: ActReply, Msg: m, Req: req} }

var sqRestarted = Action{Kind: ActRestart}

// sqStep is one call made on a Seq in a script, and what it must return.
type sqStep struct {
	do   string  // "request", "receive", "reply", "outstanding"
	m    Message // the request, the message received, or the reply
	req  Header  // reply: the request answered
	want []Action
	out  bool // outstanding: Outstanding()
	fail bool // the call fails with a *ProtocolError
}

func sqRq(m Message, want ...Action) sqStep  { return sqStep{do: "request", m: m, want: want} }
func sqRcv(m Message, want ...Action) sqStep { return sqStep{do: "receive", m: m, want: want} }
func sqAns(req, m Message, want ...Action) sqStep {
	return sqStep{do: "reply", req: req.Header, m: m, want: want}
}
func sqBad(m Message) sqStep         { return sqStep{do: "receive", m: m, fail: true} }
func sqOut(out bool) sqStep          { return sqStep{do: "outstanding", out: out} }
func sqSteps(s ...[]sqStep) []sqStep { return slices.Concat(s...) }

// sqRound is our request m numbered seq, and its reply OK.
func sqRound(m Message, seq uint32) []sqStep {
	return []sqStep{
		sqRq(m, sqSend(sqAt(m, seq))),
		sqRcv(sqOK(seq), sqReplied(sqOK(seq), sqAt(m, seq))),
	}
}

// sqGreeted is a worker's HELLO and its reply.
var sqGreeted = sqRound(sqHello, 0)

// sqGreet is a foreman receiving and answering the worker's HELLO.
var sqGreet = []sqStep{
	sqRcv(sqAt(sqHello, 0), sqDeliver(sqAt(sqHello, 0))),
	sqAns(sqAt(sqHello, 0), sqOK(0), sqSend(sqOK(0))),
}

func sqRun(t *testing.T, s *Seq, steps []sqStep) {
	t.Helper()
	for i, st := range steps {
		var got []Action
		var err error
		switch st.do {
		case "request":
			got, err = s.Request(st.m)
		case "receive":
			got, err = s.Receive(st.m)
		case "reply":
			got, err = s.Reply(st.req, st.m)
		case "outstanding":
			require.Equal(t, st.out, s.Outstanding(), "step %d: Outstanding", i)
			continue
		default:
			t.Fatalf("step %d: unknown step %q", i, st.do)
		}
		if st.fail {
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe, "step %d: %s %v %d", i, st.do, st.m.Type, st.m.Seq)
			return
		}
		require.NoError(t, err, "step %d: %s %v %d", i, st.do, st.m.Type, st.m.Seq)
		if len(got) == 0 {
			got = nil
		}
		require.Equal(t, st.want, got, "step %d: %s %v %d", i, st.do, st.m.Type, st.m.Seq)
	}
}

type sqCase struct {
	name  string
	role  Role
	cfg   SeqConfig
	steps []sqStep
}

func sqRunCases(t *testing.T, cases []sqCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sqRun(t, NewSeq(c.role, c.cfg), c.steps)
		})
	}
}

func TestSeqNumbering(t *testing.T) {
	sqRunCases(t, []sqCase{
		{"worker numbers are even", RoleWorker, SeqConfig{}, sqSteps(
			sqGreeted, sqRound(sqUpdate(1), 2), sqRound(sqUpdate(2), 4), sqRound(sqUpdate(3), 6),
		)},
		{"foreman numbers are odd", RoleForeman, SeqConfig{}, sqSteps(
			sqGreet, sqRound(sqJob(1), 1), sqRound(sqJob(2), 3), sqRound(sqCancel(3), 5),
		)},
		{"foreman skips past the worker's numbers", RoleForeman, SeqConfig{}, sqSteps(
			sqGreet,
			[]sqStep{
				sqRcv(sqAt(sqUpdate(1), 2), sqDeliver(sqAt(sqUpdate(1), 2))),
				sqAns(sqAt(sqUpdate(1), 2), sqOK(0), sqSend(sqOK(2))),
				sqRcv(sqAt(sqUpdate(2), 6), sqDeliver(sqAt(sqUpdate(2), 6))),
				sqAns(sqAt(sqUpdate(2), 6), sqOK(0), sqSend(sqOK(6))),
			},
			sqRound(sqJob(1), 7),
		)},
		{"worker skips past the foreman's numbers", RoleWorker, SeqConfig{}, sqSteps(
			sqGreeted,
			[]sqStep{
				sqRcv(sqAt(sqJob(1), 1), sqDeliver(sqAt(sqJob(1), 1))),
				sqAns(sqAt(sqJob(1), 1), sqOK(0), sqSend(sqOK(1))),
				sqRcv(sqAt(sqJob(2), 5), sqDeliver(sqAt(sqJob(2), 5))),
				sqAns(sqAt(sqJob(2), 5), sqOK(0), sqSend(sqOK(5))),
			},
			sqRound(sqUpdate(1), 6),
			sqRound(sqUpdate(2), 8),
		)},
		{"numbers seen while waiting count too", RoleWorker, SeqConfig{}, sqSteps(
			sqGreeted,
			[]sqStep{
				sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2))),
				sqRcv(sqAt(sqJob(1), 5)),
				sqRcv(sqOK(2), sqReplied(sqOK(2), sqAt(sqUpdate(1), 2)), sqDeliver(sqAt(sqJob(1), 5))),
				sqAns(sqAt(sqJob(1), 5), sqOK(0), sqSend(sqOK(5))),
			},
			sqRound(sqUpdate(2), 6),
		)},
		{"the reply carries the request's number", RoleForeman, SeqConfig{}, sqSteps(
			sqGreet,
			[]sqStep{
				sqRcv(sqAt(sqUpdate(1), 4), sqDeliver(sqAt(sqUpdate(1), 4))),
				// The number given with the reply is ignored.
				sqAns(sqAt(sqUpdate(1), 4), sqOK(99), sqSend(sqOK(4))),
			},
		)},
	})
}

func TestSeqHelloFirst(t *testing.T) {
	sqRunCases(t, []sqCase{
		{"worker holds other requests until a HELLO", RoleWorker, SeqConfig{}, []sqStep{
			sqRq(sqUpdate(1)),
			sqRq(sqUpdate(2)),
			sqOut(false),
			sqRq(sqHello, sqSend(sqAt(sqHello, 0))),
			sqRcv(sqOK(0), sqSend(sqAt(sqUpdate(1), 2)), sqReplied(sqOK(0), sqAt(sqHello, 0))),
			sqRcv(sqOK(2), sqSend(sqAt(sqUpdate(2), 4)), sqReplied(sqOK(2), sqAt(sqUpdate(1), 2))),
		}},
		{"foreman holds its requests until the HELLO", RoleForeman, SeqConfig{}, []sqStep{
			sqRq(sqJob(1)),
			sqRq(sqCancel(2)),
			sqOut(false),
			sqRcv(sqAt(sqHello, 0), sqDeliver(sqAt(sqHello, 0))),
			sqAns(sqAt(sqHello, 0), sqOK(0), sqSend(sqOK(0)), sqSend(sqAt(sqJob(1), 1))),
			sqRcv(sqOK(1), sqSend(sqAt(sqCancel(2), 3)), sqReplied(sqOK(1), sqAt(sqJob(1), 1))),
		}},
		{"foreman refuses another first request", RoleForeman, SeqConfig{}, []sqStep{
			sqRq(sqJob(1)),
			sqBad(sqAt(sqCancel(1), 0)),
		}},
		{"worker refuses a request before its HELLO", RoleWorker, SeqConfig{}, []sqStep{
			sqRq(sqUpdate(1)),
			sqBad(sqAt(sqJob(1), 1)),
		}},
	})
}

func TestSeqOneOutstanding(t *testing.T) {
	sqRunCases(t, []sqCase{
		{"our requests wait in order", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqOut(false),
			sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2))),
			sqRq(sqUpdate(2)),
			sqRq(sqUpdate(3)),
			sqOut(true),
			sqRcv(sqOK(2), sqSend(sqAt(sqUpdate(2), 4)), sqReplied(sqOK(2), sqAt(sqUpdate(1), 2))),
			sqRcv(sqOK(4), sqSend(sqAt(sqUpdate(3), 6)), sqReplied(sqOK(4), sqAt(sqUpdate(2), 4))),
			sqOut(true),
			sqRcv(sqOK(6), sqReplied(sqOK(6), sqAt(sqUpdate(3), 6))),
			sqOut(false),
		})},
		{"a delivered request is answered before ours", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRcv(sqAt(sqJob(1), 1), sqDeliver(sqAt(sqJob(1), 1))),
			sqRq(sqUpdate(1)),
			sqOut(false),
			sqAns(sqAt(sqJob(1), 1), sqOK(0), sqSend(sqOK(1)), sqSend(sqAt(sqUpdate(1), 2))),
		})},
		{"answers in any order", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRcv(sqAt(sqUpdate(1), 2)),
			sqRcv(sqAt(sqUpdate(2), 4)),
			sqRq(sqJob(2)),
			sqRcv(sqOK(1), sqReplied(sqOK(1), sqAt(sqJob(1), 1)),
				sqDeliver(sqAt(sqUpdate(1), 2)), sqDeliver(sqAt(sqUpdate(2), 4))),
			sqAns(sqAt(sqUpdate(2), 4), sqOK(0), sqSend(sqOK(4))),
			sqAns(sqAt(sqUpdate(1), 2), sqOK(0), sqSend(sqOK(2)), sqSend(sqAt(sqJob(2), 5))),
		})},
	})
}

func TestSeqRequestWhileWaiting(t *testing.T) {
	waiting := sqSteps(sqGreeted, []sqStep{sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2)))})
	replied := sqReplied(sqOK(2), sqAt(sqUpdate(1), 2))
	sqRunCases(t, []sqCase{
		{"higher is kept until our reply", RoleWorker, SeqConfig{}, sqSteps(waiting, []sqStep{
			sqRcv(sqAt(sqJob(1), 3)),
			sqOut(true),
			sqRcv(sqOK(2), replied, sqDeliver(sqAt(sqJob(1), 3))),
			sqAns(sqAt(sqJob(1), 3), sqOK(0), sqSend(sqOK(3))),
		})},
		{"several higher are delivered in order", RoleWorker, SeqConfig{}, sqSteps(waiting, []sqStep{
			sqRcv(sqAt(sqJob(1), 3)),
			sqRcv(sqAt(sqCancel(2), 5)),
			sqRq(sqUpdate(2)),
			sqRcv(sqOK(2), replied, sqDeliver(sqAt(sqJob(1), 3)), sqDeliver(sqAt(sqCancel(2), 5))),
			sqAns(sqAt(sqJob(1), 3), sqOK(0), sqSend(sqOK(3))),
			sqAns(sqAt(sqCancel(2), 5), sqOK(0), sqSend(sqOK(5)), sqSend(sqAt(sqUpdate(2), 6))),
		})},
		{"lower is delivered at once", RoleWorker, SeqConfig{}, sqSteps(waiting, []sqStep{
			sqRcv(sqAt(sqJob(1), 1), sqDeliver(sqAt(sqJob(1), 1))),
			sqAns(sqAt(sqJob(1), 1), sqOK(0), sqSend(sqOK(1))),
			sqOut(true),
			sqRcv(sqOK(2), replied),
		})},
		{"STOP immediate is delivered at once", RoleWorker, SeqConfig{}, sqSteps(waiting, []sqStep{
			sqRcv(sqAt(sqStopNow, 3), sqDeliver(sqAt(sqStopNow, 3))),
			sqAns(sqAt(sqStopNow, 3), sqOK(0), sqSend(sqOK(3))),
			sqRcv(sqOK(2), replied),
		})},
		{"STOP immediate passes kept requests", RoleWorker, SeqConfig{}, sqSteps(waiting, []sqStep{
			sqRcv(sqAt(sqJob(1), 3)),
			sqRcv(sqAt(sqStopNow, 5), sqDeliver(sqAt(sqStopNow, 5))),
			sqRcv(sqOK(2), replied, sqDeliver(sqAt(sqJob(1), 3))),
		})},
		{"a plain STOP is kept", RoleWorker, SeqConfig{}, sqSteps(waiting, []sqStep{
			sqRcv(sqAt(sqStop(2), 3)),
			sqRcv(sqOK(2), replied, sqDeliver(sqAt(sqStop(2), 3))),
		})},
		{"foreman keeps a higher UPDATE", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRcv(sqAt(sqUpdate(1), 2)),
			sqRcv(sqOK(1), sqReplied(sqOK(1), sqAt(sqJob(1), 1)), sqDeliver(sqAt(sqUpdate(1), 2))),
		})},
	})
}

func TestSeqOverflow(t *testing.T) {
	waiting := sqSteps(sqGreeted, []sqStep{sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2)))})
	replied := sqReplied(sqOK(2), sqAt(sqUpdate(1), 2))
	var full []sqStep
	for i := range uint32(seqDefaultQueue) {
		full = append(full, sqRcv(sqAt(sqJob(i), 3+2*i)))
	}
	last := 3 + 2*uint32(seqDefaultQueue)
	sqRunCases(t, []sqCase{
		{"queue of one", RoleWorker, SeqConfig{QueueLen: 1}, sqSteps(waiting, []sqStep{
			sqRcv(sqAt(sqJob(1), 3)),
			sqRcv(sqAt(sqCancel(2), 5), sqSend(sqError(CodeOverflow, 5))),
			sqRcv(sqAt(sqStopNow, 7), sqDeliver(sqAt(sqStopNow, 7))),
			sqAns(sqAt(sqStopNow, 7), sqOK(0), sqSend(sqOK(7))),
			sqRcv(sqOK(2), replied, sqDeliver(sqAt(sqJob(1), 3))),
			sqAns(sqAt(sqJob(1), 3), sqOK(0), sqSend(sqOK(3))),
		})},
		{"no queue", RoleWorker, SeqConfig{QueueLen: -1}, sqSteps(waiting, []sqStep{
			sqRcv(sqAt(sqJob(1), 3), sqSend(sqError(CodeOverflow, 3))),
			sqRcv(sqOK(2), replied),
			sqRq(sqUpdate(2), sqSend(sqAt(sqUpdate(2), 4))),
		})},
		{"sixteen by default", RoleWorker, SeqConfig{}, sqSteps(waiting, full, []sqStep{
			sqRcv(sqAt(sqJob(99), last), sqSend(sqError(CodeOverflow, last))),
		})},
	})
}

func TestSeqOverflowResend(t *testing.T) {
	overflow := func(seq uint32) Message { return sqError(CodeOverflow, seq) }
	sqRunCases(t, []sqCase{
		{"after a good reply to another request", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRq(sqCancel(2)),
			sqRcv(overflow(1), sqSend(sqAt(sqCancel(2), 3)), sqReplied(overflow(1), sqAt(sqJob(1), 1))),
			sqRcv(sqOK(3), sqSend(sqAt(sqJob(1), 5)), sqReplied(sqOK(3), sqAt(sqCancel(2), 3))),
			sqRcv(sqOK(5), sqReplied(sqOK(5), sqAt(sqJob(1), 5))),
			sqOut(false),
		})},
		{"an ERROR reply does not count", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRq(sqCancel(2)),
			sqRq(sqCancel(3)),
			sqRcv(overflow(1), sqSend(sqAt(sqCancel(2), 3)), sqReplied(overflow(1), sqAt(sqJob(1), 1))),
			sqRcv(sqError(CodeNoProcs, 3), sqSend(sqAt(sqCancel(3), 5)),
				sqReplied(sqError(CodeNoProcs, 3), sqAt(sqCancel(2), 3))),
			sqRcv(sqOK(5), sqSend(sqAt(sqJob(1), 7)), sqReplied(sqOK(5), sqAt(sqCancel(3), 5))),
			sqRcv(sqOK(7), sqReplied(sqOK(7), sqAt(sqJob(1), 7))),
		})},
		{"the owner's order is kept", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRq(sqCancel(2)),
			sqRq(sqCancel(3)),
			sqRq(sqCancel(4)),
			sqRcv(overflow(1), sqSend(sqAt(sqCancel(2), 3)), sqReplied(overflow(1), sqAt(sqJob(1), 1))),
			sqRcv(overflow(3), sqSend(sqAt(sqCancel(3), 5)), sqReplied(overflow(3), sqAt(sqCancel(2), 3))),
			sqRcv(sqOK(5), sqSend(sqAt(sqJob(1), 7)), sqReplied(sqOK(5), sqAt(sqCancel(3), 5))),
			sqRcv(sqOK(7), sqSend(sqAt(sqCancel(2), 9)), sqReplied(sqOK(7), sqAt(sqJob(1), 7))),
			sqRcv(sqOK(9), sqSend(sqAt(sqCancel(4), 11)), sqReplied(sqOK(9), sqAt(sqCancel(2), 9))),
		})},
		{"alone, again once the peer's requests are answered", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRcv(sqAt(sqUpdate(1), 2)),
			sqRcv(overflow(1), sqReplied(overflow(1), sqAt(sqJob(1), 1)), sqDeliver(sqAt(sqUpdate(1), 2))),
			sqOut(false),
			sqAns(sqAt(sqUpdate(1), 2), sqOK(0), sqSend(sqOK(2)), sqSend(sqAt(sqJob(1), 3))),
			sqRcv(sqOK(3), sqReplied(sqOK(3), sqAt(sqJob(1), 3))),
		})},
		{"alone with nothing to answer, again at once", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2))),
			sqRcv(overflow(2), sqSend(sqAt(sqUpdate(1), 4)), sqReplied(overflow(2), sqAt(sqUpdate(1), 2))),
			sqRcv(sqOK(4), sqReplied(sqOK(4), sqAt(sqUpdate(1), 4))),
		})},
	})
}

func TestSeqResetSent(t *testing.T) {
	// MaxSeq 10: the worker numbers 0 … 8, and at 10 no request would fit
	// after its next one. arg0 is the last reply's number.
	upTo8 := sqSteps(sqGreeted, sqRound(sqUpdate(1), 2), sqRound(sqUpdate(2), 4),
		sqRound(sqUpdate(3), 6), sqRound(sqUpdate(4), 8))
	reset := sqReset(10, 8)
	sqRunCases(t, []sqCase{
		{"worker at MaxSeq", RoleWorker, SeqConfig{MaxSeq: 10}, sqSteps(upTo8, []sqStep{
			sqRq(sqUpdate(5), sqSend(reset)),
			sqOut(true),
			sqRq(sqUpdate(6)),
			// The foreman's older request is delivered and answered.
			sqRcv(sqAt(sqJob(1), 9), sqDeliver(sqAt(sqJob(1), 9))),
			// A newer one is dropped without reply.
			sqRcv(sqAt(sqCancel(2), 11)),
			sqAns(sqAt(sqJob(1), 9), sqOK(0), sqSend(sqOK(9))),
			sqRcv(sqReset(10, 9), sqRestarted),
			sqOut(false),
			// Numbers start from zero, HELLO first, then what waited.
			sqRq(sqHello, sqSend(sqAt(sqHello, 0))),
			sqRcv(sqOK(0), sqSend(sqAt(sqUpdate(5), 2)), sqReplied(sqOK(0), sqAt(sqHello, 0))),
			sqRcv(sqOK(2), sqSend(sqAt(sqUpdate(6), 4)), sqReplied(sqOK(2), sqAt(sqUpdate(5), 2))),
			sqRcv(sqOK(4), sqReplied(sqOK(4), sqAt(sqUpdate(6), 4))),
		})},
		{"foreman at MaxSeq", RoleForeman, SeqConfig{MaxSeq: 10}, sqSteps(sqGreet,
			sqRound(sqJob(1), 1), sqRound(sqJob(2), 3), sqRound(sqJob(3), 5), sqRound(sqJob(4), 7),
			[]sqStep{
				sqRq(sqJob(5), sqSend(sqReset(9, 7))),
				sqRcv(sqAt(sqUpdate(1), 8), sqDeliver(sqAt(sqUpdate(1), 8))),
				sqAns(sqAt(sqUpdate(1), 8), sqOK(0), sqSend(sqOK(8))),
				sqRcv(sqReset(9, 8), sqRestarted),
				// The foreman waits for the worker's HELLO.
				sqRq(sqCancel(6)),
				sqOut(false),
				sqRcv(sqAt(sqHello, 0), sqDeliver(sqAt(sqHello, 0))),
				sqAns(sqAt(sqHello, 0), sqOK(0), sqSend(sqOK(0)), sqSend(sqAt(sqJob(5), 1))),
				sqRcv(sqOK(1), sqSend(sqAt(sqCancel(6), 3)), sqReplied(sqOK(1), sqAt(sqJob(5), 1))),
			})},
		{"a peer's RESET too is dropped when higher", RoleForeman, SeqConfig{MaxSeq: 10}, sqSteps(sqGreet,
			sqRound(sqJob(1), 1), sqRound(sqJob(2), 3), sqRound(sqJob(3), 5), sqRound(sqJob(4), 7),
			[]sqStep{
				sqRq(sqJob(5), sqSend(sqReset(9, 7))),
				sqRcv(sqReset(10, 7)),
				sqRcv(sqReset(9, 7), sqRestarted),
			})},
		{"a peer's lower RESET wins over ours", RoleWorker, SeqConfig{MaxSeq: 10}, sqSteps(upTo8, []sqStep{
			sqRq(sqUpdate(5), sqSend(reset)),
			sqRcv(sqReset(9, 8), sqSend(sqReset(9, 8)), sqRestarted),
			sqOut(false),
			sqRq(sqHello, sqSend(sqAt(sqHello, 0))),
			sqRcv(sqOK(0), sqSend(sqAt(sqUpdate(5), 2)), sqReplied(sqOK(0), sqAt(sqHello, 0))),
		})},
		{"a lower RESET waits for the answers below it", RoleWorker, SeqConfig{MaxSeq: 10}, sqSteps(upTo8, []sqStep{
			sqRq(sqUpdate(5), sqSend(reset)),
			sqRcv(sqAt(sqJob(1), 9), sqDeliver(sqAt(sqJob(1), 9))),
			sqRcv(sqReset(11, 8)),
			sqAns(sqAt(sqJob(1), 9), sqOK(0), sqSend(sqOK(9))),
			sqRcv(reset, sqRestarted),
		})},
		{"the last of 32 bits", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRcv(sqAt(sqJob(1), 0xFFFFFFF9), sqDeliver(sqAt(sqJob(1), 0xFFFFFFF9))),
			sqAns(sqAt(sqJob(1), 0xFFFFFFF9), sqOK(0), sqSend(sqOK(0xFFFFFFF9))),
		}, sqRound(sqUpdate(1), 0xFFFFFFFA), sqRound(sqUpdate(2), 0xFFFFFFFC), []sqStep{
			sqRq(sqUpdate(3), sqSend(sqReset(0xFFFFFFFE, 0xFFFFFFFC))),
			sqRcv(sqReset(0xFFFFFFFE, 0), sqRestarted),
		})},
		{"a RESET numbered 0xFFFFFFFF", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRcv(sqReset(0xFFFFFFFF, 0), sqSend(sqReset(0xFFFFFFFF, 0)), sqRestarted),
		})},
	})
}

func TestSeqResetReceived(t *testing.T) {
	sqRunCases(t, []sqCase{
		{"requests below it are answered first, both ways", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRcv(sqAt(sqUpdate(1), 2)), // kept: above our JOB
			sqRcv(sqReset(4, 0)),        // waits for the JOB's reply and the UPDATE's
			sqRq(sqCancel(2)),           // no request after a RESET
			sqOut(true),
			sqRcv(sqOK(1), sqReplied(sqOK(1), sqAt(sqJob(1), 1)), sqDeliver(sqAt(sqUpdate(1), 2))),
			sqOut(false),
			sqAns(sqAt(sqUpdate(1), 2), sqOK(0), sqSend(sqOK(2)), sqSend(sqReset(4, 2)), sqRestarted),
			sqRcv(sqAt(sqHello, 0), sqDeliver(sqAt(sqHello, 0))),
			sqAns(sqAt(sqHello, 0), sqOK(0), sqSend(sqOK(0)), sqSend(sqAt(sqCancel(2), 1))),
		})},
		{"our request above it is dropped and sent again", RoleWorker, SeqConfig{MaxSeq: 12}, sqSteps(sqGreeted,
			sqRound(sqUpdate(1), 2), sqRound(sqUpdate(2), 4), sqRound(sqUpdate(3), 6), sqRound(sqUpdate(4), 8),
			[]sqStep{
				sqRq(sqUpdate(5), sqSend(sqAt(sqUpdate(5), 10))),
				sqRq(sqUpdate(6)),
				sqRcv(sqReset(9, 8), sqSend(sqReset(9, 8)), sqRestarted),
				sqOut(false),
				sqRq(sqHello, sqSend(sqAt(sqHello, 0))),
				sqRcv(sqOK(0), sqSend(sqAt(sqUpdate(5), 2)), sqReplied(sqOK(0), sqAt(sqHello, 0))),
				sqRcv(sqOK(2), sqSend(sqAt(sqUpdate(6), 4)), sqReplied(sqOK(2), sqAt(sqUpdate(5), 2))),
			})},
		{"answered at once when nothing is under way", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRcv(sqReset(2, 0), sqSend(sqReset(2, 0)), sqRestarted),
			sqRq(sqJob(1)),
			sqOut(false),
		})},
		{"a delivered request is answered first", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRcv(sqAt(sqJob(1), 1), sqDeliver(sqAt(sqJob(1), 1))),
			sqRcv(sqReset(3, 0)),
			sqAns(sqAt(sqJob(1), 1), sqOK(0), sqSend(sqOK(1)), sqSend(sqReset(3, 1)), sqRestarted),
		})},
		{"an overflowed request is kept", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2))),
			sqRcv(sqReset(3, 0)),
			sqRcv(sqError(CodeOverflow, 2), sqSend(sqReset(3, 2)),
				sqReplied(sqError(CodeOverflow, 2), sqAt(sqUpdate(1), 2)), sqRestarted),
			sqRq(sqHello, sqSend(sqAt(sqHello, 0))),
			sqRcv(sqOK(0), sqSend(sqAt(sqUpdate(1), 2)), sqReplied(sqOK(0), sqAt(sqHello, 0))),
		})},
	})
}

func TestSeqProtocolErrors(t *testing.T) {
	// MaxSeq 6: the worker's third request is a RESET at 6.
	resetSent := sqSteps(sqGreeted, sqRound(sqUpdate(1), 2), sqRound(sqUpdate(2), 4),
		[]sqStep{sqRq(sqUpdate(3), sqSend(sqReset(6, 4)))})
	cases := []struct {
		name  string
		role  Role
		cfg   SeqConfig
		setup []sqStep
		bad   Message
	}{
		{"reply without a request", RoleWorker, SeqConfig{}, nil, sqError(CodeNoProcs, 0)},
		{"reply after the request was answered", RoleWorker, SeqConfig{}, sqGreeted, sqError(CodeNoProcs, 0)},
		{"reply with another number", RoleWorker, SeqConfig{}, sqSteps(sqGreeted,
			[]sqStep{sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2)))}), sqError(CodeNoProcs, 4)},
		{"request with the number of ours", RoleWorker, SeqConfig{}, sqSteps(sqGreeted,
			[]sqStep{sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2)))}), sqAt(sqJob(1), 2)},
		{"ERROR with the peer's parity", RoleForeman, SeqConfig{}, sqGreet, sqError(CodeOverflow, 2)},
		{"first request neither HELLO nor UPDATE", RoleForeman, SeqConfig{}, nil, sqAt(sqCancel(1), 0)},
		{"request before the worker's HELLO", RoleWorker, SeqConfig{}, nil, sqAt(sqJob(1), 1)},
		{"no number left for a RESET", RoleWorker, SeqConfig{}, sqGreeted, sqAt(sqJob(1), 0xFFFFFFFF)},
		{"reply of a request's type", RoleWorker, SeqConfig{}, []sqStep{
			sqRq(sqHello, sqSend(sqAt(sqHello, 0))),
		}, sqAt(sqJob(1), 0)},
		{"request answered by RESET", RoleWorker, SeqConfig{}, []sqStep{
			sqRq(sqHello, sqSend(sqAt(sqHello, 0))),
		}, sqReset(0, 0)},
		{"RESET answered by OK", RoleWorker, SeqConfig{MaxSeq: 6}, resetSent, sqOK(6)},
		{"RESET answered before a request below it", RoleWorker, SeqConfig{MaxSeq: 6}, sqSteps(resetSent,
			[]sqStep{sqRcv(sqAt(sqJob(1), 5), sqDeliver(sqAt(sqJob(1), 5)))}), sqReset(6, 0)},
		{"request after the peer's RESET", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRcv(sqReset(4, 0)),
		}), sqAt(sqUpdate(1), 6)},
		{"second RESET of the peer", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRq(sqJob(1), sqSend(sqAt(sqJob(1), 1))),
			sqRcv(sqReset(4, 0)),
		}), sqReset(6, 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSeq(c.role, c.cfg)
			sqRun(t, s, c.setup)
			_, err := s.Receive(c.bad)
			var pe *ProtocolError
			require.ErrorAs(t, err, &pe)
			assert.Contains(t, err.Error(), "fuq: protocol error: "+c.role.String()+": ")
			// The Seq refuses everything after.
			_, err2 := s.Request(sqUpdate(9))
			assert.Same(t, err, err2)
			_, err2 = s.Receive(sqOK(0))
			assert.Same(t, err, err2)
			_, err2 = s.Reply(Header{Type: TypeJob, Seq: 1}, sqOK(0))
			assert.Same(t, err, err2)
		})
	}
}

// What the reference accepts, the Seq accepts: the reference's
// conversation loop (proto.Conn.ConversationLoop) checks neither parity
// nor order, takes as the reply whatever bears the awaited number, drops
// an OK that answers nothing, and dispatches a STOP(immediate) whatever
// its number; its foreman answers an UPDATE that comes before the HELLO.
func TestSeqAcceptsWhatTheReferenceAccepts(t *testing.T) {
	stopNow := sqStop(StopImmediate)
	sqRunCases(t, []sqCase{
		{"an OK that answers nothing is dropped, and numbered past", RoleWorker, SeqConfig{}, sqSteps(sqGreeted,
			[]sqStep{sqRcv(sqOK(4))},
			sqRound(sqUpdate(1), 6),
		)},
		{"an OK of another number than the awaited reply is dropped", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2))),
			sqRcv(sqOK(4)),
			sqOut(true),
			sqRcv(sqOK(2), sqReplied(sqOK(2), sqAt(sqUpdate(1), 2))),
		})},
		{"an OK of the peer's parity is dropped", RoleForeman, SeqConfig{}, sqSteps(sqGreet,
			[]sqStep{sqRcv(sqOK(2))},
			sqRound(sqJob(1), 3),
		)},
		{"a request of our parity is a request", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRcv(sqAt(sqJob(1), 2), sqDeliver(sqAt(sqJob(1), 2))),
			sqAns(sqAt(sqJob(1), 2), sqOK(0), sqSend(sqOK(2))),
		}, sqRound(sqUpdate(1), 4))},
		{"a request numbered below an earlier one", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRcv(sqAt(sqUpdate(1), 6), sqDeliver(sqAt(sqUpdate(1), 6))),
			sqAns(sqAt(sqUpdate(1), 6), sqOK(0), sqSend(sqOK(6))),
			sqRcv(sqAt(sqUpdate(2), 4), sqDeliver(sqAt(sqUpdate(2), 4))),
			sqAns(sqAt(sqUpdate(2), 4), sqOK(0), sqSend(sqOK(4))),
		}, sqRound(sqJob(1), 7))},
		{"a request repeating a number", RoleForeman, SeqConfig{}, sqSteps(sqGreet, []sqStep{
			sqRcv(sqAt(sqUpdate(1), 2), sqDeliver(sqAt(sqUpdate(1), 2))),
			sqAns(sqAt(sqUpdate(1), 2), sqOK(0), sqSend(sqOK(2))),
			sqRcv(sqAt(sqUpdate(2), 2), sqDeliver(sqAt(sqUpdate(2), 2))),
			sqAns(sqAt(sqUpdate(2), 2), sqOK(0), sqSend(sqOK(2))),
		})},
		{"a request below the peer's own reply", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, sqRound(sqUpdate(1), 2), []sqStep{
			sqRcv(sqAt(sqJob(1), 1), sqDeliver(sqAt(sqJob(1), 1))),
		})},
		{"STOP(immediate) bearing the awaited number", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2))),
			sqRcv(sqAt(stopNow, 2), sqDeliver(sqAt(stopNow, 2))),
		})},
		{"STOP(immediate) numbered below everything", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, sqRound(sqUpdate(1), 2), []sqStep{
			sqRcv(sqAt(sqJob(1), 5), sqDeliver(sqAt(sqJob(1), 5))),
			sqRcv(sqAt(stopNow, 1), sqDeliver(sqAt(stopNow, 1))),
		})},
		{"STOP(immediate) above the awaited number is not kept waiting", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRq(sqUpdate(1), sqSend(sqAt(sqUpdate(1), 2))),
			sqRcv(sqAt(stopNow, 9), sqDeliver(sqAt(stopNow, 9))),
		})},
		{"STOP(immediate) before the worker's HELLO", RoleWorker, SeqConfig{}, []sqStep{
			sqRcv(sqAt(stopNow, 0), sqDeliver(sqAt(stopNow, 0))),
		}},
		{"STOP(immediate) during the peer's RESET", RoleWorker, SeqConfig{}, sqSteps(sqGreeted, []sqStep{
			sqRcv(sqAt(sqJob(1), 1), sqDeliver(sqAt(sqJob(1), 1))),
			sqRcv(sqReset(3, 0)),
			sqRcv(sqAt(stopNow, 5), sqDeliver(sqAt(stopNow, 5))),
		})},
		{"an UPDATE before the HELLO", RoleForeman, SeqConfig{}, []sqStep{
			sqRcv(sqAt(sqUpdate(1), 40), sqDeliver(sqAt(sqUpdate(1), 40))),
			sqRq(sqJob(1)),
			sqAns(sqAt(sqUpdate(1), 40), sqOK(0), sqSend(sqOK(40))), // no JOB before the HELLO
			sqRcv(sqAt(sqHello, 42), sqDeliver(sqAt(sqHello, 42))),
			sqAns(sqAt(sqHello, 42), sqOK(0), sqSend(sqOK(42)), sqSend(sqAt(sqJob(1), 43))),
		}},
	})
}

func TestSeqOwnerErrors(t *testing.T) {
	s := NewSeq(RoleWorker, SeqConfig{})
	sqRun(t, s, sqSteps(sqGreeted, []sqStep{
		sqRcv(sqAt(sqJob(1), 1), sqDeliver(sqAt(sqJob(1), 1))),
	}))
	notProtocol := func(err error) {
		t.Helper()
		require.Error(t, err)
		var pe *ProtocolError
		require.False(t, errors.As(err, &pe), "%v", err)
	}
	_, err := s.Reply(Header{Type: TypeJob, Seq: 3}, sqOK(0))
	notProtocol(err) // never delivered
	_, err = s.Reply(Header{Type: TypeCancel, Seq: 1}, sqOK(0))
	notProtocol(err) // another request
	_, err = s.Reply(Header{Type: TypeJob, Seq: 1}, sqReset(0, 0))
	notProtocol(err) // the Seq answers RESETs itself
	for _, ty := range []Type{TypeReset, TypeOK, TypeError} {
		_, err = s.Request(sqMsg(ty, 0))
		notProtocol(err)
	}
	// None of that changed anything.
	sqRun(t, s, []sqStep{
		sqRq(sqUpdate(1)),
		sqAns(sqAt(sqJob(1), 1), sqOK(0), sqSend(sqOK(1)), sqSend(sqAt(sqUpdate(1), 2))),
	})
	_, err = s.Reply(Header{Type: TypeJob, Seq: 1}, sqOK(0))
	notProtocol(err) // twice
	sqRun(t, s, []sqStep{sqRcv(sqOK(2), sqReplied(sqOK(2), sqAt(sqUpdate(1), 2)))})
}

func TestNewSeqConfig(t *testing.T) {
	require.Panics(t, func() { NewSeq(RoleWorker, SeqConfig{MaxSeq: 5}) })
	require.Panics(t, func() { NewSeq(Role(2), SeqConfig{}) })
	require.NotPanics(t, func() { NewSeq(RoleForeman, SeqConfig{MaxSeq: 6}) })
	assert.Equal(t, "worker", RoleWorker.String())
	assert.Equal(t, "foreman", RoleForeman.String())
	assert.Equal(t, "Role(7)", Role(7).String())
	for k, name := range map[ActionKind]string{ActSend: "send", ActRequest: "request", ActReply: "reply",
		ActRestart: "restart", 0: "ActionKind(0)"} {
		assert.Equal(t, name, k.String())
	}
}

// sqEnd is one end of an in-test connection: its Seq, the messages on their
// way to it, and what its owner was given.
type sqEnd struct {
	t        *testing.T
	name     string
	s        *Seq
	role     Role
	peer     *sqEnd
	inbox    []Message // sent by the peer, not yet received: a FIFO
	todo     []Message // requests delivered, not yet answered
	replies  []Action  // ActReply, in order
	restarts int
	hello    func() Message // the HELLO of a worker's restart
	onAction func(*sqEnd, Action)
}

func sqPair(t *testing.T, wcfg, fcfg SeqConfig) (w, f *sqEnd) {
	w = &sqEnd{t: t, name: "worker", s: NewSeq(RoleWorker, wcfg), role: RoleWorker}
	f = &sqEnd{t: t, name: "foreman", s: NewSeq(RoleForeman, fcfg), role: RoleForeman}
	w.peer, f.peer = f, w
	w.hello = func() Message { return sqHello }
	return w, f
}

// carry carries out acts as the socket code does: in order, a restart of
// the worker requesting its HELLO at once.
func (e *sqEnd) carry(acts []Action) {
	e.t.Helper()
	for _, a := range acts {
		if e.onAction != nil {
			e.onAction(e, a)
		}
		switch a.Kind {
		case ActSend:
			e.peer.inbox = append(e.peer.inbox, a.Msg)
		case ActRequest:
			e.todo = append(e.todo, a.Msg)
		case ActReply:
			e.replies = append(e.replies, a)
		case ActRestart:
			e.restarts++
			if e.role == RoleWorker {
				e.request(e.hello())
			}
		default:
			e.t.Fatalf("%s: unknown action %v", e.name, a.Kind)
		}
	}
}

func (e *sqEnd) request(m Message) {
	e.t.Helper()
	acts, err := e.s.Request(m)
	require.NoError(e.t, err, "%s: Request %v", e.name, m.Type)
	e.carry(acts)
}

// answer answers the i-th request awaiting an answer with m.
func (e *sqEnd) answer(i int, m Message) {
	e.t.Helper()
	req := e.todo[i]
	e.todo = slices.Delete(e.todo, i, i+1)
	acts, err := e.s.Reply(req.Header, m)
	require.NoError(e.t, err, "%s: Reply to %v %d", e.name, req.Type, req.Seq)
	e.carry(acts)
}

// receive takes the first message on its way to e.
func (e *sqEnd) receive() Message {
	e.t.Helper()
	require.NotEmpty(e.t, e.inbox, "%s: nothing to receive", e.name)
	m := e.inbox[0]
	e.inbox = e.inbox[1:]
	acts, err := e.s.Receive(m)
	require.NoError(e.t, err, "%s: Receive %v %d", e.name, m.Type, m.Seq)
	e.carry(acts)
	return m
}

// exchange receives everything on the way, both ways, answering every
// request OK, until nothing moves.
func sqExchange(w, f *sqEnd) {
	for len(w.inbox)+len(f.inbox)+len(w.todo)+len(f.todo) > 0 {
		for _, e := range []*sqEnd{w, f} {
			for len(e.inbox) > 0 {
				e.receive()
			}
			for len(e.todo) > 0 {
				e.answer(0, sqOK(0))
			}
		}
	}
}

func sqSeqs(ms []Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%v %d", m.Type, m.Seq))
	}
	return out
}

func sqReplySeqs(as []Action) []string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%v %d: %v %d", a.Req.Type, a.Req.Seq, a.Msg.Type, a.Msg.Seq))
	}
	return out
}

func TestSeqPairCrossing(t *testing.T) {
	w, f := sqPair(t, SeqConfig{}, SeqConfig{})
	w.request(sqHello)
	f.receive()
	require.Equal(t, []Message{sqAt(sqHello, 0)}, f.todo)
	f.answer(0, sqOK(0))
	w.receive()
	// Both ask at once: the foreman's JOB 1 is below the worker's UPDATE 2,
	// so the worker answers it at once, and the foreman keeps the UPDATE
	// until its JOB is answered.
	w.request(sqUpdate(1))
	f.request(sqJob(1))
	assert.Equal(t, []string{"UPDATE 2"}, sqSeqs(f.inbox))
	assert.Equal(t, []string{"JOB 1"}, sqSeqs(w.inbox))
	f.receive()
	assert.Empty(t, f.todo)
	w.receive()
	require.Equal(t, []string{"JOB 1"}, sqSeqs(w.todo))
	w.answer(0, sqOK(0))
	f.receive()
	require.Equal(t, []string{"UPDATE 2"}, sqSeqs(f.todo))
	f.answer(0, sqOK(0))
	w.receive()
	assert.Equal(t, []string{"HELLO 0: OK 0", "UPDATE 2: OK 2"}, sqReplySeqs(w.replies))
	assert.Equal(t, []string{"JOB 1: OK 1"}, sqReplySeqs(f.replies))
	// Next: both above 2.
	f.request(sqJob(2))
	w.request(sqUpdate(2))
	assert.Equal(t, []string{"JOB 3"}, sqSeqs(w.inbox))
	assert.Equal(t, []string{"UPDATE 4"}, sqSeqs(f.inbox))
	sqExchange(w, f)
	assert.False(t, w.s.Outstanding())
	assert.False(t, f.s.Outstanding())
}

func TestSeqPairOverflow(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("other request waiting %v", cancel), func(t *testing.T) {
			// The worker keeps none of the foreman's requests.
			w, f := sqPair(t, SeqConfig{QueueLen: -1}, SeqConfig{})
			w.request(sqHello)
			sqExchange(w, f)
			f.request(sqJob(1))
			w.receive()
			w.answer(0, sqOK(0))
			w.request(sqUpdate(1)) // UPDATE 2
			f.receive()            // OK 1
			f.request(sqJob(2))    // JOB 3, crossing UPDATE 2
			if cancel {
				f.request(sqCancel(3))
			}
			w.receive() // JOB 3 above UPDATE 2: ERROR(overflow)
			assert.Equal(t, []Message{sqError(CodeOverflow, 3)}, f.inbox[1:])
			f.receive() // UPDATE 2 below JOB 3: delivered
			f.answer(0, sqOK(0))
			f.receive() // the ERROR
			if cancel {
				// The CANCEL goes first; the JOB after the CANCEL's OK.
				assert.Equal(t, []string{"OK 2", "CANCEL 5"}, sqSeqs(w.inbox))
				w.receive()
				w.receive()
				w.answer(0, sqOK(0))
				f.receive()
				assert.Equal(t, []string{"JOB 7"}, sqSeqs(w.inbox))
			} else {
				// Nothing else waits: the JOB goes again at once, behind the
				// answer the worker was waiting for.
				assert.Equal(t, []string{"OK 2", "JOB 5"}, sqSeqs(w.inbox))
			}
			sqExchange(w, f)
			want := []string{"JOB 1: OK 1", "JOB 3: ERROR 3", "JOB 5: OK 5"}
			if cancel {
				want = []string{"JOB 1: OK 1", "JOB 3: ERROR 3", "CANCEL 5: OK 5", "JOB 7: OK 7"}
			}
			assert.Equal(t, want, sqReplySeqs(f.replies))
		})
	}
}

func TestSeqPairReset(t *testing.T) {
	t.Run("worker sends it", func(t *testing.T) {
		w, f := sqPair(t, SeqConfig{MaxSeq: 10}, SeqConfig{MaxSeq: 10})
		w.request(sqHello)
		for i := range uint32(4) {
			w.request(sqUpdate(i))
		}
		sqExchange(w, f)
		w.request(sqUpdate(5))
		assert.Equal(t, []Message{sqReset(10, 8)}, f.inbox)
		f.receive()
		assert.Equal(t, 1, f.restarts)
		assert.Equal(t, []Message{sqReset(10, 8)}, w.inbox)
		w.receive() // the reply: restart, HELLO at once
		assert.Equal(t, 1, w.restarts)
		assert.Equal(t, []string{"HELLO 0"}, sqSeqs(f.inbox))
		sqExchange(w, f)
		assert.Equal(t, []string{"HELLO 0: OK 0", "UPDATE 2: OK 2"}, sqReplySeqs(w.replies[len(w.replies)-2:]))
		assert.Equal(t, sqUpdate(5).Arg0, w.replies[len(w.replies)-1].Req.Arg0)
	})
	t.Run("foreman sends it", func(t *testing.T) {
		w, f := sqPair(t, SeqConfig{MaxSeq: 10}, SeqConfig{MaxSeq: 10})
		w.request(sqHello)
		sqExchange(w, f)
		for i := range uint32(4) {
			f.request(sqJob(i))
		}
		sqExchange(w, f)
		f.request(sqJob(5))
		assert.Equal(t, []Message{sqReset(9, 7)}, w.inbox)
		w.receive()
		// The worker answers, restarts and sends its HELLO behind.
		assert.Equal(t, []string{"RESET 9", "HELLO 0"}, sqSeqs(f.inbox))
		f.receive()
		assert.Equal(t, 1, f.restarts)
		assert.False(t, f.s.Outstanding())
		sqExchange(w, f)
		assert.Equal(t, "JOB 1: OK 1", sqReplySeqs(f.replies)[len(f.replies)-1])
		assert.Equal(t, sqJob(5).Arg0, f.replies[len(f.replies)-1].Req.Arg0)
	})
	t.Run("both at once", func(t *testing.T) {
		w, f := sqPair(t, SeqConfig{MaxSeq: 10}, SeqConfig{MaxSeq: 10})
		w.request(sqHello)
		for i := range uint32(4) {
			w.request(sqUpdate(i))
		}
		sqExchange(w, f)
		w.request(sqUpdate(5)) // RESET 10
		f.request(sqJob(1))    // RESET 9
		assert.Equal(t, []Message{sqReset(10, 8)}, f.inbox)
		assert.Equal(t, []Message{sqReset(9, 8)}, w.inbox)
		w.receive() // 9 wins: the worker answers it and restarts
		assert.Equal(t, []string{"RESET 10", "RESET 9", "HELLO 0"}, sqSeqs(f.inbox))
		f.receive() // RESET 10 is dropped
		assert.Zero(t, f.restarts)
		f.receive() // the reply to its RESET 9
		assert.Equal(t, 1, f.restarts)
		sqExchange(w, f)
		assert.Equal(t, 1, w.restarts)
		assert.Equal(t, "UPDATE 2: OK 2", sqReplySeqs(w.replies)[len(w.replies)-1])
		assert.Equal(t, "JOB 1: OK 1", sqReplySeqs(f.replies)[len(f.replies)-1])
	})
	t.Run("an older request is answered first", func(t *testing.T) {
		// The foreman's numbers reach higher, so its JOB 9 can cross the
		// worker's RESET 10.
		w, f := sqPair(t, SeqConfig{MaxSeq: 10}, SeqConfig{MaxSeq: 12})
		w.request(sqHello)
		for i := range uint32(4) {
			w.request(sqUpdate(i))
		}
		sqExchange(w, f)
		w.request(sqUpdate(5)) // RESET 10
		f.request(sqJob(1))    // JOB 9
		w.receive()
		require.Equal(t, []string{"JOB 9"}, sqSeqs(w.todo))
		w.answer(0, sqOK(0))
		f.receive() // the RESET waits for the reply to JOB 9
		assert.Zero(t, f.restarts)
		f.receive()
		assert.Equal(t, 1, f.restarts)
		assert.Equal(t, []string{"JOB 9: OK 9"}, sqReplySeqs(f.replies))
		sqExchange(w, f)
		assert.Equal(t, 1, w.restarts)
		assert.Equal(t, "UPDATE 2: OK 2", sqReplySeqs(w.replies)[len(w.replies)-1])
	})
	t.Run("a newer request is dropped and sent again", func(t *testing.T) {
		// The worker RESETs at 8, the foreman's JOB 9 crosses it.
		w, f := sqPair(t, SeqConfig{MaxSeq: 9}, SeqConfig{MaxSeq: 12})
		w.request(sqHello)
		w.request(sqUpdate(1))
		w.request(sqUpdate(2))
		sqExchange(w, f) // HELLO 0, UPDATE 2, 4
		f.request(sqJob(1))
		f.request(sqJob(2))
		sqExchange(w, f) // JOB 5, 7
		w.request(sqUpdate(3))
		f.request(sqJob(3))
		assert.Equal(t, []Message{sqReset(8, 7)}, f.inbox)
		assert.Equal(t, []string{"JOB 9"}, sqSeqs(w.inbox))
		w.receive() // dropped
		assert.Empty(t, w.todo)
		f.receive() // its JOB is dropped: it answers and restarts
		assert.Equal(t, 1, f.restarts)
		sqExchange(w, f)
		assert.Equal(t, "JOB 1: OK 1", sqReplySeqs(f.replies)[len(f.replies)-1])
		assert.Equal(t, sqJob(3).Arg0, f.replies[len(f.replies)-1].Req.Arg0)
		assert.Equal(t, "UPDATE 2: OK 2", sqReplySeqs(w.replies)[len(w.replies)-1])
	})
}

// TestSeqRandom runs two Seqs against each other, the owners asking and
// answering at random and the two directions of the stream interleaved at
// random, each in order. Every request must get exactly one final reply
// (one that is not ERROR(overflow)) and be delivered exactly once.
func TestSeqRandom(t *testing.T) {
	cases := []struct {
		name       string
		wcfg, fcfg SeqConfig
		resets     bool // RESETs must have happened
		overflows  bool // ERROR(overflow) must have happened
		dropped    bool // requests dropped by a RESET must have been sent again
	}{
		{"queue of one", SeqConfig{MaxSeq: 12, QueueLen: 1}, SeqConfig{MaxSeq: 12, QueueLen: 1}, true, false, false},
		{"no queue", SeqConfig{MaxSeq: 12, QueueLen: -1}, SeqConfig{MaxSeq: 12, QueueLen: -1}, true, true, false},
		// Only ends with different MaxSeq cross a RESET with a request
		// numbered above it (often when the foreman's limit is the lower).
		{"different MaxSeq", SeqConfig{QueueLen: -1}, SeqConfig{MaxSeq: 8, QueueLen: 1}, true, false, true},
		{"different MaxSeq, other way", SeqConfig{MaxSeq: 8, QueueLen: 1}, SeqConfig{QueueLen: -1}, true, true, false},
		{"smallest MaxSeq", SeqConfig{MaxSeq: 6, QueueLen: -1}, SeqConfig{MaxSeq: 6, QueueLen: -1}, true, true, false},
		{"defaults", SeqConfig{}, SeqConfig{}, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var total sqStats
			for seed := range uint64(5) {
				t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
					st := sqRandom(t, c.wcfg, c.fcfg, seed, 2000)
					total.restarts += st.restarts
					total.overflows += st.overflows
					total.requests += st.requests
					total.dropped += st.dropped
				})
			}
			t.Logf("%d requests, %d restarts, %d overflows, %d dropped by a RESET",
				total.requests, total.restarts, total.overflows, total.dropped)
			if c.resets {
				assert.NotZero(t, total.restarts)
			}
			if c.overflows {
				assert.NotZero(t, total.overflows)
			}
			if c.dropped {
				assert.NotZero(t, total.dropped)
			}
		})
	}
}

type sqStats struct{ requests, restarts, overflows, dropped int }

// sqInfo is what happened to one request of the random test.
type sqInfo struct {
	from      Role
	ty        Type
	sends     int
	delivered int
	final     int
	overflows int
}

func sqRandom(t *testing.T, wcfg, fcfg SeqConfig, seed uint64, steps int) sqStats {
	rng := rand.New(rand.NewPCG(seed, 0x5e9))
	w, f := sqPair(t, wcfg, fcfg)
	reqs := map[uint64]*sqInfo{}
	var stats sqStats
	// A request's tag is its arg0, or for STOP(immediate) its code (arg0
	// being taken); the reply carries the tag in arg0.
	key := func(m Message) uint64 {
		if m.Type == TypeStop && m.Arg0 == StopImmediate {
			return 1<<32 | uint64(m.Code)
		}
		return uint64(m.Arg0)
	}
	nextTag, nextStop := uint32(1), uint8(1)
	newRequest := func(from Role, m Message) Message {
		if m.Type == TypeStop && m.Arg0 == StopImmediate {
			m.Code = Code(nextStop)
			nextStop++
		} else {
			m.Arg0 = nextTag
			nextTag++
		}
		reqs[key(m)] = &sqInfo{from: from, ty: m.Type}
		stats.requests++
		return m
	}
	w.hello = func() Message { return newRequest(RoleWorker, sqHello) }
	check := func(e *sqEnd, a Action) {
		switch a.Kind {
		case ActSend:
			if Role(a.Msg.Seq&1) == e.role && a.Msg.Type != TypeReset {
				in := reqs[key(a.Msg)]
				require.NotNil(t, in, "%s: unknown request %v %d sent", e.name, a.Msg.Type, a.Msg.Seq)
				in.sends++
			}
		case ActRequest:
			in := reqs[key(a.Msg)]
			require.NotNil(t, in, "%s: unknown request %v %d", e.name, a.Msg.Type, a.Msg.Seq)
			require.Equal(t, e.peer.role, in.from)
			require.Equal(t, in.ty, a.Msg.Type)
			in.delivered++
			require.Equal(t, 1, in.delivered, "%s: %v %d delivered twice", e.name, a.Msg.Type, a.Msg.Seq)
		case ActReply:
			in := reqs[key(a.Req)]
			require.NotNil(t, in)
			require.Equal(t, e.role, in.from)
			require.Equal(t, a.Req.Seq, a.Msg.Seq)
			if a.Msg.Type == TypeError && a.Msg.Code == CodeOverflow {
				in.overflows++
				stats.overflows++
				require.Zero(t, in.final)
				return
			}
			require.Equal(t, uint32(key(a.Req)), a.Msg.Arg0, "%s: reply to %v %d", e.name, a.Req.Type, a.Req.Seq)
			in.final++
			require.Equal(t, 1, in.final, "%s: %v %d answered twice", e.name, a.Req.Type, a.Req.Seq)
		case ActRestart:
			stats.restarts++
		}
	}
	w.onAction, f.onAction = check, check
	answer := func(e *sqEnd) {
		i := rng.IntN(len(e.todo))
		r := sqMsg(TypeOK, uint32(key(e.todo[i])))
		if rng.IntN(10) == 0 {
			r = sqMsg(TypeError, r.Arg0)
			r.Code = CodeNoProcs
		}
		e.answer(i, r)
	}
	issue := func() {
		if rng.IntN(2) == 0 {
			w.request(newRequest(RoleWorker, sqUpdate(0)))
			return
		}
		var m Message
		switch n := rng.IntN(20); {
		case n == 0 && nextStop < 255:
			m = sqStopNow
		case n < 3:
			m = sqStop(1)
		case n < 6:
			m = sqCancel(0)
		default:
			m = sqJob(0)
		}
		f.request(newRequest(RoleForeman, m))
	}
	w.request(w.hello())
	ends := []*sqEnd{w, f}
	for step := 0; ; step++ {
		busy := false
		for _, e := range ends {
			busy = busy || len(e.inbox) > 0 || len(e.todo) > 0
		}
		if step >= steps && !busy {
			break
		}
		require.Less(t, step, 50*steps, "no end in sight")
		switch n := rng.IntN(100); {
		case n < 25 && step < steps:
			issue()
		case n < 50:
			if e := ends[rng.IntN(2)]; len(e.todo) > 0 {
				answer(e)
			}
		default:
			if e := ends[rng.IntN(2)]; len(e.inbox) > 0 {
				e.receive()
			}
		}
	}
	for k, in := range reqs {
		require.Equal(t, 1, in.final, "request %#x (%v of the %v) got %d final replies", k, in.ty, in.from, in.final)
		// Sent once, again after each ERROR(overflow), and again after
		// each RESET that dropped it.
		require.GreaterOrEqual(t, in.sends, 1+in.overflows)
		stats.dropped += in.sends - 1 - in.overflows
	}
	assert.False(t, w.s.Outstanding())
	assert.False(t, f.s.Outstanding())
	return stats
}
