package fuq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// DefaultTimeout bounds a write to the peer, each read once a message has
// begun, the wait for the first message of a connection, and (on the
// foreman's side) the wait for the reply to a request.
const DefaultTimeout = 30 * time.Second

// link is one connection, driven by the goroutine that owns its Seq: a
// reader goroutine decodes messages into in, and the owner writes the
// messages that the Seq's actions ask for. Only the owner touches the Seq.
type link struct {
	conn msgConn
	seq  *Seq
	in   chan received
	done chan struct{} // closed when the reader has returned
	log  *zap.Logger
	out  []byte
}

// received is one message read, or the error that ended reading.
type received struct {
	msg Message
	err error
}

func newLink(conn msgConn, role Role, cfg SeqConfig, maxBody int, log *zap.Logger) *link {
	l := &link{conn: conn, seq: NewSeq(role, cfg), in: make(chan received, 16), done: make(chan struct{}), log: log}
	go l.read(maxBody)
	return l
}

// read decodes messages until the connection fails; the last value sent
// carries the error.
func (l *link) read(maxBody int) {
	defer close(l.done)
	for {
		m, err := l.conn.readMessage(maxBody)
		l.in <- received{m, err}
		if err != nil {
			return
		}
	}
}

// close closes the connection and waits for the reader, draining what it
// still had to say.
func (l *link) close() {
	l.conn.close()
	for {
		select {
		case <-l.in:
		case <-l.done:
			return
		}
	}
}

// send writes one message, within the connection's timeout.
func (l *link) send(m Message) error {
	var err error
	if l.out, err = m.AppendBinary(l.out[:0]); err != nil {
		return err
	}
	if err := l.conn.writeMessage(l.out); err != nil {
		return err
	}
	// arg0 as sent: a body's length is set by the encoding.
	l.log.Debug("sent", zap.Stringer("type", m.Type), zap.Uint32("seq", m.Seq), zap.Uint32("arg0", binary.LittleEndian.Uint32(l.out[12:])))
	return nil
}

// carry out performs the Seq's actions: it sends what is to be sent and
// hands the rest to handle, whose own actions are carried out in turn.
func (l *link) carryOut(acts []Action, handle func(Action) ([]Action, error)) error {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		if a.Kind == ActSend {
			if err := l.send(a.Msg); err != nil {
				return err
			}
			continue
		}
		more, err := handle(a)
		if err != nil {
			return err
		}
		acts = append(acts, more...)
	}
	return nil
}

// request asks the Seq to send m, and carries out what follows.
func (l *link) request(m Message, handle func(Action) ([]Action, error)) error {
	acts, err := l.seq.Request(m)
	if err != nil {
		return err
	}
	return l.carryOut(acts, handle)
}

// reply answers req with m, and carries out what follows.
func (l *link) reply(req Header, m Message) ([]Action, error) {
	return l.seq.Reply(req, m)
}

// receive feeds one message to the Seq and carries out what follows.
func (l *link) receive(r received, handle func(Action) ([]Action, error)) error {
	if r.err != nil {
		return r.err
	}
	l.log.Debug("received", zap.Stringer("type", r.msg.Type), zap.Uint32("seq", r.msg.Seq), zap.Uint32("arg0", r.msg.Arg0))
	acts, err := l.seq.Receive(r.msg)
	if err != nil {
		return err
	}
	return l.carryOut(acts, handle)
}

// ok is an OK message carrying the processor counts.
func ok(nproc, nrun int) Message {
	return Message{Header: Header{Type: TypeOK, Arg0: PackOK(clamp16(nproc), clamp16(nrun))}}
}

func clamp16(n int) uint16 {
	return uint16(max(0, min(n, 0xFFFF)))
}

// errorReply is an ERROR message with code c.
func errorReply(c Code) Message {
	return Message{Header: Header{Type: TypeError, Code: c}}
}

// errStoppedNow is a worker's STOP(immediate).
var errStoppedNow = errors.New("fuq: stopped immediately by the foreman")

func unexpected(m Message) error {
	return &ProtocolError{Msg: fmt.Sprintf("unexpected %v", m.Type)}
}
