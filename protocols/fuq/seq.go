package fuq

import (
	"errors"
	"fmt"
	"slices"
)

// Role says which end of a connection a Seq serves.
type Role uint8

// The two ends. A worker's requests are numbered n<<1 (even), the
// foreman's n<<1|1 (odd).
const (
	RoleWorker  Role = 0
	RoleForeman Role = 1
)

// String returns "worker" or "foreman".
func (r Role) String() string {
	switch r {
	case RoleWorker:
		return "worker"
	case RoleForeman:
		return "foreman"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// SeqConfig configures a Seq.
type SeqConfig struct {
	// MaxSeq is the largest sequence number this end uses for a request;
	// 0 means 0xFFFFFFFF. A RESET is sent instead of a request after which
	// no request of ours would fit. It is injectable so that tests reach
	// it; values from 1 to 5 leave no room for a conversation and make
	// NewSeq panic.
	MaxSeq uint32
	// QueueLen is how many of the peer's requests are kept while we wait
	// for the reply to ours (section 4.6 b); 0 means 16, and a negative
	// value keeps none (every such request is answered ERROR(overflow)).
	QueueLen int
}

// The defaults of SeqConfig, and the smallest MaxSeq.
const (
	seqDefaultMax   = uint32(0xFFFFFFFF)
	seqDefaultQueue = 16
	seqMinMax       = uint32(6)
)

// ActionKind says what the owner of a Seq must do.
type ActionKind uint8

// The actions.
const (
	// ActSend asks the owner to write Msg to the peer.
	ActSend ActionKind = iota + 1
	// ActRequest delivers Msg, a request from the peer: the owner handles
	// it and answers with Seq.Reply(Msg.Header, reply).
	ActRequest
	// ActReply delivers Msg, the peer's reply to our request Req (Req.Seq
	// is the number it was sent with). An ERROR(overflow) reply is only
	// news: the Seq sends that request again by itself.
	ActReply
	// ActRestart says the connection starts over after a RESET: sequence
	// numbers are zero again. A worker must now send HELLO (Seq.Request of
	// a HELLO); the Seq then sends the requests that the RESET dropped,
	// with new numbers, after it.
	ActRestart
)

// String returns the action's name.
func (k ActionKind) String() string {
	switch k {
	case ActSend:
		return "send"
	case ActRequest:
		return "request"
	case ActReply:
		return "reply"
	case ActRestart:
		return "restart"
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one thing the owner of a Seq must do.
type Action struct {
	Kind ActionKind
	Msg  Message
	Req  Message // ActReply: our request that Msg answers
}

// Seq is the sequence numbering of one connection (sections 3 to 5 of the
// spec), as a pure state machine: it does no I/O, starts no goroutine and
// reads no clock. Its owner feeds it what the peer sends (Receive), the
// requests it wants to make (Request) and its answers to the peer's
// requests (Reply); each call returns the actions to carry out, in order.
// Within the actions of one call every ActSend comes first, so an owner
// that writes them in order may call the Seq again while it handles the
// others. A Seq is not safe for concurrent use.
//
// Numbering: our requests carry our parity, and each one is the smallest
// number of our parity above every number sent or received so far on the
// connection. What the peer sends is taken as the reference takes it: an
// OK or ERROR numbered as our outstanding request is its reply, and an OK
// that answers nothing is dropped; a message of a request's type is a
// request whatever its number (the reference checks neither parity nor
// order), unless it bears the number of our outstanding request; a
// STOP(immediate) is delivered at once whatever its number and whatever
// else is under way. A RESET is a reply when it has our parity, a request
// when it has the peer's.
//
// Order: one request of ours is outstanding at a time; the others wait in
// the Seq, first in first out. A request of the peer is answered before
// ours go on. While we wait for the reply to our request R, a STOP
// (immediate) of the peer and its requests numbered below R are delivered
// at once; those above R are kept (QueueLen of them) and delivered once R
// is answered; past that the Seq answers them ERROR(overflow) itself.
//
// Overflow: a request of ours answered ERROR(overflow) is delivered as an
// ActReply and kept. It is sent again after the next reply of the peer
// that is not an ERROR, to another request of ours; while it waits, our
// later requests go before it. If no other request of ours waits, it goes
// again as soon as the Seq may send: by then every request the peer sent
// before its ERROR — among them the one whose wait filled its queue — has
// been answered, ahead of our new request on the stream, so the peer's
// queue has drained. (Waiting instead for some later message of the peer
// could wait for ever.)
//
// RESET: when the next request would leave no number for a request after
// it (SeqConfig.MaxSeq), the Seq sends RESET instead (arg0: the number of
// the last reply sent or received) and keeps the request. Once a RESET is
// sent or received, no request of ours goes out; the peer's requests
// numbered below the RESET are delivered and must be answered, and those
// above it are dropped without reply. The Seq answering a RESET replies
// with the same RESET once everything numbered below it is answered both
// ways: the peer's requests by our owner, and ours by the peer (ours
// numbered above it are dropped and kept). Then, or when our RESET is
// answered, the connection restarts (ActRestart) as if new: numbers start
// from zero again, the worker's HELLO goes first, and the requests dropped
// go again after it with new numbers; nothing is sent on the new run until
// the owner's next call (a worker's Request of its HELLO). The reply to our
// RESET is not delivered: the ActRestart stands for it. If both ends send
// RESET at once, the lower one wins: the end that sent the higher one
// answers the lower one, and the other drops the higher one. MaxSeq bounds
// only our own numbers: the peer's are checked against 32 bits, so ends
// with different limits get along.
//
// HELLO: the first request of a connection, and of every restart, is the
// worker's HELLO. A worker's Seq holds its other requests until a HELLO
// has been requested (and sends that HELLO first); a foreman's Seq holds
// its requests until it has received the HELLO. Before it, the foreman's
// Seq delivers an UPDATE too, as the reference foreman does (whose
// workers, reconnecting, may send an UPDATE before their HELLO, and are
// answered OK(0xFFFF|0xFFFF), "send your HELLO"); any other first request
// is refused.
//
// Errors: what the peer does wrong is a *ProtocolError, after which the
// Seq refuses every call with the same error (the owner closes the
// connection); what the owner does wrong (a Reply to a request that is not
// awaiting one, a Request of a RESET, OK or ERROR) is a plain error that
// changes nothing.
type Seq struct {
	role     Role
	maxSeq   uint32
	queueLen int
	err      error // the protocol error that ended the connection

	// The requests of our owner not yet sent, in the order of Request,
	// and the requests answered ERROR(overflow) among them (retry set).
	waiting      []seqPending
	nextOrd      uint64
	retryBlocked bool // a retry waits for a non-error reply

	// The state of the current run of numbers (until a RESET).
	hi        int64  // the largest number sent or received; -1 for none
	lastReply uint32 // the number of the last reply sent or received
	greeted   bool   // worker: HELLO sent; foreman: HELLO received
	out       *Message
	outOrd    uint64
	incoming  []Message // the peer's requests kept while out is unanswered
	delivered []Header  // the peer's requests delivered and not answered
	reset     *seqReset
}

// seqPending is a request of our owner that waits to be sent.
type seqPending struct {
	m     Message
	ord   uint64 // the order of Request
	retry bool   // answered ERROR(overflow) once
}

// seqReset is a RESET under way.
type seqReset struct {
	seq  uint32
	ours bool // we sent it (else we answer it)
}

// NewSeq returns the numbering of a new connection for the given end.
func NewSeq(role Role, cfg SeqConfig) *Seq {
	if role != RoleWorker && role != RoleForeman {
		panic(fmt.Sprintf("fuq: NewSeq of unknown %v", role))
	}
	s := &Seq{role: role, maxSeq: cfg.MaxSeq, queueLen: cfg.QueueLen}
	if s.maxSeq == 0 {
		s.maxSeq = seqDefaultMax
	}
	if s.maxSeq < seqMinMax {
		panic(fmt.Sprintf("fuq: SeqConfig.MaxSeq %d is below %d", cfg.MaxSeq, seqMinMax))
	}
	switch {
	case s.queueLen == 0:
		s.queueLen = seqDefaultQueue
	case s.queueLen < 0:
		s.queueLen = 0
	}
	s.restart()
	return s
}

// Outstanding reports whether a request of ours (a RESET among them)
// awaits its reply.
func (s *Seq) Outstanding() bool { return s.out != nil }

// Request asks to send the request m; its Seq field is ignored (the Seq
// numbers it). Only one request of ours is outstanding at a time: the
// others wait in the Seq, in order, and go out as replies come. It returns
// the actions to carry out now: an ActSend of m or of a RESET, or none if m
// has to wait.
func (s *Seq) Request(m Message) ([]Action, error) {
	if s.err != nil {
		return nil, s.err
	}
	switch m.Type {
	case TypeReset, TypeOK, TypeError:
		return nil, fmt.Errorf("fuq: %v cannot be requested", m.Type)
	}
	s.waiting = append(s.waiting, seqPending{m: m, ord: s.nextOrd})
	s.nextOrd++
	sends, tail := s.proceed()
	return append(sends, tail...), nil
}

// Reply answers the request that an ActRequest delivered (req is its
// header) with m, whose Seq field is set to req.Seq. It returns the ActSend
// of the reply, then what answering unlocks: the reply to a RESET and
// ActRestart, or our next request.
func (s *Seq) Reply(req Header, m Message) ([]Action, error) {
	if s.err != nil {
		return nil, s.err
	}
	i := slices.IndexFunc(s.delivered, func(h Header) bool { return h.Seq == req.Seq && h.Type == req.Type })
	if i < 0 {
		return nil, fmt.Errorf("fuq: reply to %v %d, which awaits no reply", req.Type, req.Seq)
	}
	if m.Type == TypeReset {
		return nil, errors.New("fuq: a RESET is answered by the Seq itself")
	}
	s.delivered = slices.Delete(s.delivered, i, i+1)
	m.Seq = req.Seq
	s.lastReply = req.Seq
	sends, tail := s.proceed()
	return append(append([]Action{{Kind: ActSend, Msg: m}}, sends...), tail...), nil
}

// Receive takes one message of the peer and returns what to do.
func (s *Seq) Receive(m Message) ([]Action, error) {
	if s.err != nil {
		return nil, s.err
	}
	switch {
	case m.Type == TypeStop && m.Arg0 == StopImmediate:
		// Honoured whatever its number, as the reference does.
		s.notePeer(m.Seq)
		return s.deliver(m), nil
	case m.Type == TypeOK || m.Type == TypeError:
		if s.out != nil && m.Seq == s.out.Seq {
			return s.receiveReply(m)
		}
		if m.Type == TypeOK {
			// The reference drops an OK that answers nothing.
			s.notePeer(m.Seq)
			return nil, nil
		}
		if s.out == nil {
			return s.fail("%v %d answers no request", m.Type, m.Seq)
		}
		return s.fail("%v %d while request %d awaits its reply", m.Type, m.Seq, s.out.Seq)
	case m.Type == TypeReset && s.ours(m.Seq):
		return s.receiveReply(m)
	case m.Type != TypeReset && s.out != nil && m.Seq == s.out.Seq:
		return s.fail("%v %d answers %v %d", m.Type, m.Seq, s.out.Type, s.out.Seq)
	}
	return s.receiveRequest(m)
}

// receiveReply takes the reply to our outstanding request, or a RESET
// numbered with our parity.
func (s *Seq) receiveReply(m Message) ([]Action, error) {
	if s.out == nil {
		return s.fail("%v %d answers no request", m.Type, m.Seq)
	}
	req := *s.out
	if m.Seq != req.Seq {
		return s.fail("%v %d while request %d awaits its reply", m.Type, m.Seq, req.Seq)
	}
	s.notePeer(m.Seq)
	if req.Type == TypeReset {
		if m.Type != TypeReset {
			return s.fail("RESET %d answered with %v", req.Seq, m.Type)
		}
		if len(s.delivered) > 0 {
			return s.fail("RESET %d answered before request %d was", req.Seq, s.delivered[0].Seq)
		}
		s.restart()
		return []Action{{Kind: ActRestart}}, nil
	}
	if m.Type != TypeOK && m.Type != TypeError {
		return s.fail("%v %d answers %v %d", m.Type, m.Seq, req.Type, req.Seq)
	}
	s.out = nil
	s.lastReply = m.Seq
	switch {
	case m.Type == TypeError && m.Code == CodeOverflow:
		s.keep(seqPending{m: req, ord: s.outOrd, retry: true})
		s.retryBlocked = true
	case m.Type != TypeError:
		s.retryBlocked = false
	}
	owner := []Action{{Kind: ActReply, Msg: m, Req: req}}
	for _, q := range s.incoming {
		s.delivered = append(s.delivered, q.Header)
		owner = append(owner, Action{Kind: ActRequest, Msg: q})
	}
	s.incoming = s.incoming[:0]
	sends, tail := s.proceed()
	return append(append(sends, owner...), tail...), nil
}

// receiveRequest takes a request of the peer: a message of a request's
// type that answers nothing of ours, or a RESET of the peer's parity.
func (s *Seq) receiveRequest(m Message) ([]Action, error) {
	switch {
	case m.Type != TypeReset && m.Seq == 0xFFFFFFFF:
		return s.fail("%v %d leaves no number for a RESET", m.Type, m.Seq)
	case s.role == RoleWorker && !s.greeted:
		return s.fail("%v %d before the worker's HELLO", m.Type, m.Seq)
	case s.role == RoleForeman && !s.greeted && m.Type != TypeHello && m.Type != TypeUpdate:
		return s.fail("first request %v %d is neither HELLO nor UPDATE", m.Type, m.Seq)
	}
	s.notePeer(m.Seq)
	if s.role == RoleForeman && m.Type == TypeHello {
		s.greeted = true
	}
	if r := s.reset; r != nil {
		if !r.ours {
			return s.fail("%v %d after RESET %d", m.Type, m.Seq, r.seq)
		}
		if m.Seq > r.seq {
			return nil, nil // dropped by our RESET; the peer sends it again
		}
		if m.Type != TypeReset {
			return s.deliver(m), nil
		}
		// Both ends sent RESET: the lower one, theirs, wins, and ours is
		// dropped by it.
		s.out = nil
	}
	if m.Type == TypeReset {
		s.reset = &seqReset{seq: m.Seq}
		var owner []Action
		if s.out != nil && s.out.Seq > m.Seq {
			// Dropped by the RESET: it goes again after the restart.
			s.keep(seqPending{m: *s.out, ord: s.outOrd})
			s.out = nil
			for _, q := range s.incoming {
				s.delivered = append(s.delivered, q.Header)
				owner = append(owner, Action{Kind: ActRequest, Msg: q})
			}
			s.incoming = s.incoming[:0]
		}
		sends, tail := s.proceed()
		return append(append(sends, owner...), tail...), nil
	}
	if s.out != nil && m.Seq > s.out.Seq {
		if len(s.incoming) < s.queueLen {
			s.incoming = append(s.incoming, m)
			return nil, nil
		}
		s.lastReply = m.Seq
		e := Message{Header: Header{Type: TypeError, Code: CodeOverflow, Seq: m.Seq}}
		return []Action{{Kind: ActSend, Msg: e}}, nil
	}
	return s.deliver(m), nil
}

// deliver hands the peer's request m to the owner.
func (s *Seq) deliver(m Message) []Action {
	s.delivered = append(s.delivered, m.Header)
	return []Action{{Kind: ActRequest, Msg: m}}
}

// proceed does what the state allows now: the reply to the peer's RESET
// and the restart (tail), or our next request.
func (s *Seq) proceed() (sends, tail []Action) {
	if !s.idle() {
		return nil, nil
	}
	if r := s.reset; r != nil {
		if r.ours {
			return nil, nil
		}
		m := Message{Header: Header{Type: TypeReset, Seq: r.seq, Arg0: s.lastReply}}
		s.restart()
		return []Action{{Kind: ActSend, Msg: m}}, []Action{{Kind: ActRestart}}
	}
	i := s.next()
	if i < 0 {
		return nil, nil
	}
	seq := s.hi + 1
	if Role(seq&1) != s.role {
		seq++
	}
	if seq+2 > int64(s.maxSeq) {
		// No request would fit after this one.
		m := Message{Header: Header{Type: TypeReset, Seq: uint32(seq), Arg0: s.lastReply}}
		s.reset = &seqReset{seq: uint32(seq), ours: true}
		s.send(m, 0)
		return []Action{{Kind: ActSend, Msg: m}}, nil
	}
	p := s.waiting[i]
	s.waiting = slices.Delete(s.waiting, i, i+1)
	p.m.Seq = uint32(seq)
	if p.m.Type == TypeHello {
		s.greeted = true
	}
	s.send(p.m, p.ord)
	return []Action{{Kind: ActSend, Msg: p.m}}, nil
}

// idle reports whether nothing is awaited on either side.
func (s *Seq) idle() bool {
	return s.out == nil && len(s.delivered) == 0 && len(s.incoming) == 0
}

// next returns the index in waiting of the request to send next, or -1.
func (s *Seq) next() int {
	if !s.greeted {
		if s.role == RoleForeman {
			return -1
		}
		return slices.IndexFunc(s.waiting, func(p seqPending) bool { return p.m.Type == TypeHello })
	}
	if len(s.waiting) == 0 {
		return -1
	}
	if s.retryBlocked {
		if i := slices.IndexFunc(s.waiting, func(p seqPending) bool { return !p.retry }); i >= 0 {
			return i
		}
	}
	return 0
}

// send makes m our outstanding request.
func (s *Seq) send(m Message, ord uint64) {
	s.out = &m
	s.outOrd = ord
	s.hi = max(s.hi, int64(m.Seq))
}

// keep puts p back among the waiting requests, in its order.
func (s *Seq) keep(p seqPending) {
	i := slices.IndexFunc(s.waiting, func(q seqPending) bool { return q.ord > p.ord })
	if i < 0 {
		i = len(s.waiting)
	}
	s.waiting = slices.Insert(s.waiting, i, p)
}

// notePeer records a number received.
func (s *Seq) notePeer(seq uint32) {
	s.hi = max(s.hi, int64(seq))
}

// ours reports whether seq has our parity.
func (s *Seq) ours(seq uint32) bool { return Role(seq&1) == s.role }

// restart starts a new run of numbers, as on a new connection.
func (s *Seq) restart() {
	s.hi, s.lastReply = -1, 0
	s.greeted = false
	s.out = nil
	s.incoming, s.delivered = nil, nil
	s.reset = nil
	s.retryBlocked = false
	for i := range s.waiting {
		s.waiting[i].retry = false
	}
}

// fail ends the connection with a protocol error.
func (s *Seq) fail(format string, args ...any) ([]Action, error) {
	s.err = &ProtocolError{Msg: s.role.String() + ": " + fmt.Sprintf(format, args...)}
	return nil, s.err
}
