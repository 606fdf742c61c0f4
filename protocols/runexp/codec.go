package runexp

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Wire constants of protocol 1.3.
const (
	// Version is the protocol version this package speaks; a runner
	// accepts only a manager of the same version.
	Version = "1.3"
	// DefaultGroup is the group name of a manager or runner started
	// without one.
	DefaultGroup = "__defaulte__"
	// MaxMessage is the longest control message: the reference peers read
	// each one with a single recv of 1024 bytes.
	MaxMessage = 1024
	// DefaultPort is the manager's port unless configured.
	DefaultPort = 7227
	// DefaultMaxSize bounds the SIZE of a job or an output unless
	// configured: 1 GiB.
	DefaultMaxSize = 1 << 30
	// smallPayload is the largest payload read into memory rather than
	// into its file, so that the file is written once the exchange is
	// over: while it lasts, a runner's other workers cannot talk.
	smallPayload = 64 << 10
	// DefaultTimeout bounds every exchange on either side: each handshake
	// step, each answer an exchange waits for, each payload's progress.
	DefaultTimeout = 30 * time.Second
	// DefaultPause is how long a message that gets no answer is kept
	// apart from the next one, once the peer's host has acknowledged it
	// (see Runner.Pause): ample for a peer's thread to be scheduled and
	// read it, even on a loaded machine; paid once per connection and
	// per empty job or output.
	DefaultPause = 50 * time.Millisecond
)

// Kind is the kind of a control message.
type Kind uint8

// The control messages, in the order of a session.
const (
	KindSaluton   Kind = iota + 1 // SALUTON; MI <HOSTNAME>  runner → manager
	KindVersio                    // VERSIO <VERSION>        manager → runner
	KindKomprenas                 // KOMPRENAS               runner → manager
	KindAligi                     // ALIGI <GROUP>           manager → runner
	KindJes                       // JES                     runner → manager
	KindPeto                      // PETO                    runner → manager
	KindLaboro                    // LABORO <NAME> <TYPE> <SIZE>
	KindPreta                     // PRETA                   either way
	KindRezulto                   // REZULTO <NAME> <STATUS> <SIZE>
	KindRicevis                   // RICEVIS                 manager → runner
	KindFino                      // FINO                    manager → runner
	KindFinoAnkau                 // FINO ANKAU              runner → manager
	KindEliri                     // ELIRI                   manager → runner
	KindAtendi                    // ATENDI                  manager → runner
)

var words = [...]string{
	KindKomprenas: "KOMPRENAS",
	KindJes:       "JES",
	KindPeto:      "PETO",
	KindPreta:     "PRETA",
	KindRicevis:   "RICEVIS",
	KindFino:      "FINO",
	KindFinoAnkau: "FINO ANKAU",
	KindEliri:     "ELIRI",
	KindAtendi:    "ATENDI",
}

var kindNames = [...]string{
	KindSaluton: "SALUTON", KindVersio: "VERSIO", KindAligi: "ALIGI", KindLaboro: "LABORO", KindRezulto: "REZULTO",
}

// String returns the message's keyword, for logs.
func (k Kind) String() string {
	if int(k) < len(words) && words[k] != "" {
		return words[k]
	}
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Status is a job's outcome as REZULTO reports it.
type Status bool

// The two outcomes, sent as the words "success" and "failure".
const (
	Success Status = true
	Failure Status = false
)

func (s Status) String() string {
	if s {
		return "success"
	}
	return "failure"
}

// Message is one control message. Which fields are set depends on Kind:
// Host for a hail; Version; Group; Name, Type and Size for a job; Name,
// Status and Size for a result.
type Message struct {
	Kind    Kind
	Host    string
	Version string
	Group   string
	Name    string // the job's name: its path under runs/ without extension
	Type    string // the job's type: its extension with the dot, like ".sh"
	Status  Status
	Size    int64 // bytes that follow (the job's contents or its output)
}

// Errors of the codec.
var (
	// ErrMessageTooLong is returned for a control message longer than
	// MaxMessage bytes.
	ErrMessageTooLong = errors.New("runexp: message too long")
	// ErrSizeTooLarge is returned for a SIZE above the reader's limit,
	// before anything is allocated for it.
	ErrSizeTooLarge = errors.New("runexp: size too large")
)

// ProtocolError is a message that breaks the protocol: malformed, or not
// one the state allows.
type ProtocolError struct {
	Msg string
}

func (e *ProtocolError) Error() string { return "runexp: protocol error: " + e.Msg }

func protocolErrorf(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// AppendText appends the message's bytes as sent: no terminator. It
// refuses a message that Parse would refuse, or that is longer than
// MaxMessage.
func (m Message) AppendText(b []byte) ([]byte, error) {
	start := len(b)
	b, err := m.appendText(b)
	if err == nil && len(b)-start > MaxMessage {
		err = fmt.Errorf("%w: %d bytes", ErrMessageTooLong, len(b)-start)
	}
	if err != nil {
		return b[:start], err
	}
	return b, nil
}

func (m Message) appendText(b []byte) ([]byte, error) {
	switch m.Kind {
	case KindSaluton:
		if !validHost(m.Host) {
			return b, protocolErrorf("host name %q is not [-_a-zA-Z0-9]+", m.Host)
		}
		return append(append(b, "SALUTON; MI "...), m.Host...), nil
	case KindVersio:
		if !validVersion(m.Version) {
			return b, protocolErrorf("version %q is not like 1.3", m.Version)
		}
		return append(append(b, "VERSIO "...), m.Version...), nil
	case KindAligi:
		if !validGroup(m.Group) {
			return b, protocolErrorf("group name %q: empty, or more than one line", m.Group)
		}
		return append(append(b, "ALIGI "...), m.Group...), nil
	case KindLaboro:
		if !validName(m.Name) || !validType(m.Type) || m.Size < 0 {
			return b, protocolErrorf("bad job %q %q %d", m.Name, m.Type, m.Size)
		}
		b = append(append(append(b, "LABORO "...), m.Name...), ' ')
		b = append(append(b, m.Type...), ' ')
		return strconv.AppendInt(b, m.Size, 10), nil
	case KindRezulto:
		if !validName(m.Name) || m.Size < 0 {
			return b, protocolErrorf("bad result %q %d", m.Name, m.Size)
		}
		b = append(append(append(b, "REZULTO "...), m.Name...), ' ')
		b = append(append(b, m.Status.String()...), ' ')
		return strconv.AppendInt(b, m.Size, 10), nil
	}
	if int(m.Kind) < len(words) && words[m.Kind] != "" {
		return append(b, words[m.Kind]...), nil
	}
	return b, protocolErrorf("unknown message kind %d", m.Kind)
}

// String returns the message as sent.
func (m Message) String() string {
	b, err := m.AppendText(nil)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Parse parses one control message. One trailing "\n" or "\r\n" is
// accepted (a person typing on a terminal sends it; the reference peers
// do not). A SIZE above maxSize (<= 0 means DefaultMaxSize) is refused
// with ErrSizeTooLarge.
func Parse(b []byte, maxSize int64) (Message, error) {
	if len(b) > MaxMessage {
		return Message{}, fmt.Errorf("%w: %d bytes", ErrMessageTooLong, len(b))
	}
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	s := string(b)
	if t, ok := strings.CutSuffix(s, "\n"); ok {
		s = strings.TrimSuffix(t, "\r")
	}
	for k, w := range words {
		if w != "" && s == w {
			return Message{Kind: Kind(k)}, nil
		}
	}
	keyword, rest, _ := strings.Cut(s, " ")
	switch keyword {
	case "SALUTON;":
		host, ok := strings.CutPrefix(rest, "MI ")
		if !ok || !validHost(host) {
			break
		}
		return Message{Kind: KindSaluton, Host: host}, nil
	case "VERSIO":
		if !validVersion(rest) {
			break
		}
		return Message{Kind: KindVersio, Version: rest}, nil
	case "ALIGI":
		if !validGroup(rest) {
			break
		}
		return Message{Kind: KindAligi, Group: rest}, nil
	case "LABORO":
		// LABORO (.+) (\.[^ ]+) (\d+): the name may hold spaces, so the
		// type and size are the last two words.
		head, size, ok1 := cutLast(rest)
		name, typ, ok2 := cutLast(head)
		if !ok1 || !ok2 || !validName(name) || !validType(typ) {
			break
		}
		n, err := parseSize(size, maxSize)
		if err != nil {
			return Message{}, err
		}
		return Message{Kind: KindLaboro, Name: name, Type: typ, Size: n}, nil
	case "REZULTO":
		head, size, ok1 := cutLast(rest)
		name, status, ok2 := cutLast(head)
		if !ok1 || !ok2 || !validName(name) || (status != "success" && status != "failure") {
			break
		}
		n, err := parseSize(size, maxSize)
		if err != nil {
			return Message{}, err
		}
		return Message{Kind: KindRezulto, Name: name, Status: status == "success", Size: n}, nil
	}
	return Message{}, protocolErrorf("malformed message %q", truncate(s))
}

// cutLast splits s at its last space.
func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, ' ')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

func parseSize(s string, max int64) (int64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, protocolErrorf("size %q is not a number", truncate(s))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > max {
		return 0, fmt.Errorf("%w: %s bytes, limit %d", ErrSizeTooLarge, truncate(s), max)
	}
	return n, nil
}

func validHost(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validName is a job name the reference's (.+) matches: one line.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "\r\n")
}

// validGroup is a group name: one line.
func validGroup(s string) bool {
	return s != "" && !strings.ContainsAny(s, "\r\n")
}

// validVersion matches \d+(\.\d+)?.
func validVersion(s string) bool {
	major, minor, dot := strings.Cut(s, ".")
	digits := func(s string) bool { return s != "" && strings.TrimLeft(s, "0123456789") == "" }
	return digits(major) && (!dot || digits(minor))
}

// validType matches \.[^ ]+.
func validType(s string) bool {
	return len(s) > 1 && s[0] == '.' && !strings.ContainsAny(s, " \n\r")
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// conn is one side of a session: it reads each control message with a
// single Read, as the reference peers do (the protocol has no
// terminators: a message is what one send delivers), and writes each with
// a single Write. Payloads are read to their announced size.
//
// A message that gets no answer (the runner's JES, a PRETA before an
// empty payload) is kept apart from the next one by settle; if they
// still arrive together, a Read that holds more than one message is split
// (see split) and the rest kept for the next read. See "Two messages in a
// row" in the package documentation.
type conn struct {
	rw      readWriteDeadliner
	buf     [2 * MaxMessage]byte // room for a whole message read with the one before it
	rest    []byte               // bytes of the next message, read with this one
	out     []byte
	chunk   []byte // for payloads; allocated on first use
	maxSize int64
	timeout time.Duration // for each exchange; 0 means none

	// pause, when positive, is the rule of settle; unanswered is set by
	// a message written and cleared by one read.
	pause      time.Duration
	unanswered bool
}

type readWriteDeadliner interface {
	io.ReadWriter
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// read reads one message. With wait set, it waits without a deadline
// (a runner may take hours between requests); otherwise the exchange's
// timeout applies.
func (c *conn) read(wait bool) (Message, error) {
	if c.timeout > 0 && !wait {
		c.rw.SetReadDeadline(time.Now().Add(c.timeout))
	} else {
		c.rw.SetReadDeadline(time.Time{})
	}
	if len(c.rest) == 0 {
		n, err := c.rw.Read(c.buf[:])
		if n == 0 {
			if err == nil {
				err = io.ErrNoProgress
			}
			return Message{}, err
		}
		c.rest = c.buf[:n]
	}
	var msg []byte
	msg, c.rest = split(c.rest)
	c.unanswered = false
	return Parse(msg, c.maxSize)
}

// keywords start every message.
var keywords = []string{"SALUTON;", "VERSIO", "KOMPRENAS", "ALIGI", "JES", "PETO", "LABORO", "PRETA",
	"REZULTO", "RICEVIS", "FINO", "ELIRI", "ATENDI"}

// split cuts the first message off b: at a newline (a person typing), or
// after a whole fixed word that another message's keyword follows
// ("JESPETO"). Only a message that gets no answer can arrive with the
// next one (JES, or PRETA before an empty payload), and these are fixed
// words; no single message has either shape, so a lone message is never
// cut. A message longer than MaxMessage is left whole, for Parse to
// refuse.
func split(b []byte) (msg, rest []byte) {
	if i := strings.IndexByte(string(b), '\n'); i >= 0 && i < len(b)-1 {
		return b[:i+1], b[i+1:]
	}
	for _, w := range words {
		if w == "" || len(b) <= len(w) || string(b[:len(w)]) != w {
			continue
		}
		for _, k := range keywords {
			if strings.HasPrefix(string(b[len(w):]), k) {
				return b[:len(w)], b[len(w):]
			}
		}
	}
	return b, nil
}

// expect reads one message and checks its kind.
func (c *conn) expect(k Kind) (Message, error) {
	m, err := c.read(false)
	if err == nil && m.Kind != k {
		err = protocolErrorf("expected %v, got %v", k, m.Kind)
	}
	return m, err
}

// write sends one message in a single Write, after settle when the
// message before it got no answer.
func (c *conn) write(m Message) error {
	var err error
	if c.out, err = m.AppendText(c.out[:0]); err != nil {
		return err
	}
	if c.unanswered && c.pause > 0 {
		if err := c.settle(); err != nil {
			return err
		}
	}
	if c.timeout > 0 {
		c.rw.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	_, err = c.rw.Write(c.out)
	c.unanswered = true
	return err
}

// settle is the rule that keeps two messages apart when the first gets no
// answer (the runner's JES before its first PETO; a PRETA before an empty
// payload, then the next message): the reference peers read a message
// with one recv, so the second must not reach the peer before the peer
// has read the first. Nothing on the wire says when it has; so settle
// waits until the peer's host has acknowledged every byte sent (Linux:
// the socket's send queue is empty), which proves the first message
// arrived, and then c.pause more, the time the peer's thread has to be
// scheduled and read it. On other systems, or on a connection that is not
// TCP, it waits c.pause alone. It gives up with an error after the
// exchange's timeout.
// settleSleep is time.Sleep; tests replace it to see settle wait.
var settleSleep = time.Sleep

func (c *conn) settle() error {
	timeout := c.timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if err := waitAcked(c.rw, time.Now().Add(timeout)); err != nil {
		return err
	}
	settleSleep(c.pause)
	c.unanswered = false
	return nil
}

// readPayload copies exactly n bytes of payload to w, under the
// exchange's deadline (renewed as bytes arrive, so a large payload on a
// slow link is not cut while it progresses).
func (c *conn) readPayload(w io.Writer, n int64) error {
	if len(c.rest) > 0 { // cannot happen in lock-step; kept for safety
		k := min(int64(len(c.rest)), n)
		if _, err := w.Write(c.rest[:k]); err != nil {
			return err
		}
		c.rest, n = c.rest[k:], n-k
		c.unanswered = false
	}
	r := io.LimitReader(c.rw, n)
	chunk := c.payloadBuffer()
	for n > 0 {
		if c.timeout > 0 {
			c.rw.SetReadDeadline(time.Now().Add(c.timeout))
		}
		k, err := r.Read(chunk)
		if k > 0 {
			c.unanswered = false
			if _, werr := w.Write(chunk[:k]); werr != nil {
				return werr
			}
			n -= int64(k)
		}
		if err != nil && n > 0 {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// payloadBuffer returns the connection's buffer for payloads.
func (c *conn) payloadBuffer() []byte {
	if c.chunk == nil {
		c.chunk = make([]byte, 32<<10)
	}
	return c.chunk
}

// writePayload sends exactly n bytes from r.
func (c *conn) writePayload(r io.Reader, n int64) error {
	chunk := c.payloadBuffer()
	for n > 0 {
		k, err := io.ReadFull(r, chunk[:min(int64(len(chunk)), n)])
		if k > 0 {
			if c.timeout > 0 {
				c.rw.SetWriteDeadline(time.Now().Add(c.timeout))
			}
			if _, werr := c.rw.Write(chunk[:k]); werr != nil {
				return werr
			}
			n -= int64(k)
		}
		if err != nil && n > 0 {
			return fmt.Errorf("runexp: payload shorter than its size: %w", err)
		}
	}
	return nil
}
