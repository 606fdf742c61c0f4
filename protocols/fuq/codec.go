package fuq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/tinylib/msgp/msgp"
)

// The framing of every message.
const (
	Magic      = 0xC047 // little-endian on the wire: bytes 47 c0
	HeaderSize = 16     // the header; a body, if any, follows it

	// StopImmediate is STOP's arg0 that stops a worker at once; any other
	// arg0 is the number of processors to stop, 0 meaning all.
	StopImmediate uint32 = 0xFFFFFFFF

	// DefaultMaxBody is the longest body ReadMessage accepts when its
	// caller gives no limit. A longer one is refused before anything is
	// allocated for it.
	DefaultMaxBody = 16 << 20
)

// Type is a message's type.
type Type uint8

// The message types, numbered as in the reference. LIST is reserved there
// and unused; it is accepted and carries no body.
const (
	TypeOK     Type = 1
	TypeHello  Type = 2
	TypeJob    Type = 3
	TypeUpdate Type = 4
	TypeCancel Type = 5
	TypeList   Type = 6
	TypeStop   Type = 7
	TypeError  Type = 8
	TypeReset  Type = 9
)

var typeNames = [...]string{
	TypeOK:     "OK",
	TypeHello:  "HELLO",
	TypeJob:    "JOB",
	TypeUpdate: "UPDATE",
	TypeCancel: "CANCEL",
	TypeList:   "LIST",
	TypeStop:   "STOP",
	TypeError:  "ERROR",
	TypeReset:  "RESET",
}

// valid reports whether t is one of the known types.
func (t Type) valid() bool { return t >= TypeOK && t <= TypeReset }

// String returns the type's name as the spec writes it ("OK", "HELLO", …),
// or "Type(n)" for an unknown one.
func (t Type) String() string {
	if t.valid() {
		return typeNames[t]
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// HasBody reports whether messages of type t carry a msgpack body whose
// length is arg0: HELLO, JOB, UPDATE, CANCEL.
func (t Type) HasBody() bool {
	switch t {
	case TypeHello, TypeJob, TypeUpdate, TypeCancel:
		return true
	}
	return false
}

// Code is an ERROR message's error code (the spec's "subtype"). Other
// messages carry CodeNone.
type Code uint8

// The error codes of the reference.
const (
	CodeNone     Code = 0
	CodeOverflow Code = 1 // the peer's queue of pending requests is full
	CodeNoProcs  Code = 2 // the worker has no processors free for a JOB
)

// String returns "none", "overflow" or "no_procs", or "Code(n)" for an
// unknown code.
func (c Code) String() string {
	switch c {
	case CodeNone:
		return "none"
	case CodeOverflow:
		return "overflow"
	case CodeNoProcs:
		return "no_procs"
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Header is the 16-byte header: magic u16, type u8, code u8, seq u32, 4
// bytes padding (zero), arg0 u32, all little-endian. The padding is written
// as zeros and ignored when read.
type Header struct {
	Type Type
	Code Code
	Seq  uint32
	Arg0 uint32
}

// AppendBinary appends the 16 bytes of h to b. A header of an unknown type
// is refused with a *ProtocolError.
func (h Header) AppendBinary(b []byte) ([]byte, error) {
	if !h.Type.valid() {
		return b, &ProtocolError{Msg: "unknown message type " + strconv.Itoa(int(h.Type))}
	}
	b = binary.LittleEndian.AppendUint16(b, Magic)
	b = append(b, byte(h.Type), byte(h.Code))
	b = binary.LittleEndian.AppendUint32(b, h.Seq)
	b = append(b, 0, 0, 0, 0)
	return binary.LittleEndian.AppendUint32(b, h.Arg0), nil
}

// ParseHeader decodes the header at the front of b, which must hold at
// least HeaderSize bytes (io.ErrUnexpectedEOF otherwise). A wrong magic or
// an unknown type is a *ProtocolError; the padding and the code are not
// checked.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, io.ErrUnexpectedEOF
	}
	if m := binary.LittleEndian.Uint16(b); m != Magic {
		return Header{}, &ProtocolError{Msg: fmt.Sprintf("bad magic %#04x", m)}
	}
	h := Header{
		Type: Type(b[2]),
		Code: Code(b[3]),
		Seq:  binary.LittleEndian.Uint32(b[4:]),
		Arg0: binary.LittleEndian.Uint32(b[12:]),
	}
	if !h.Type.valid() {
		return Header{}, &ProtocolError{Msg: "unknown message type " + strconv.Itoa(int(h.Type))}
	}
	return h, nil
}

// PackOK packs OK's arg0 as the reference does: nproc<<16 | nrun, the
// processors available in the high half and the jobs running in the low
// half (the opposite of the order the spec's prose suggests).
func PackOK(nproc, nrun uint16) uint32 { return uint32(nproc)<<16 | uint32(nrun) }

// UnpackOK splits OK's arg0 into the processors available and the jobs
// running.
func UnpackOK(arg0 uint32) (nproc, nrun uint16) { return uint16(arg0 >> 16), uint16(arg0) }

// Message is a header and, for HELLO, JOB, UPDATE and CANCEL, its decoded
// body. Only the field of the message's type is used; the others are
// ignored when encoding and left nil when decoding.
type Message struct {
	Header
	Hello  *Hello        // HELLO
	Tasks  []Task        // JOB
	Update *StatusUpdate // UPDATE
	Cancel []TaskPair    // CANCEL
}

// AppendBinary appends the header and body of m to b. For the types with a
// body it encodes the body and sets arg0 to its length (the caller's Arg0 is
// ignored for them). A HELLO with nil Hello encodes an empty Hello{}, and
// JOB and CANCEL with nil slices encode empty arrays; an UPDATE with nil
// Update is an error. On error b is returned unchanged.
func (m Message) AppendBinary(b []byte) ([]byte, error) {
	if !m.Type.HasBody() {
		return m.Header.AppendBinary(b)
	}
	start := len(b)
	o, err := m.Header.AppendBinary(b)
	if err != nil {
		return b, err
	}
	switch m.Type {
	case TypeHello:
		h := m.Hello
		if h == nil {
			h = &Hello{}
		}
		o, err = h.MarshalMsg(o)
	case TypeJob:
		o, err = appendTasks(o, m.Tasks)
	case TypeUpdate:
		if m.Update == nil {
			return b, errors.New("fuq: UPDATE message without Update")
		}
		o, err = m.Update.MarshalMsg(o)
	case TypeCancel:
		o, err = appendTaskPairs(o, m.Cancel)
	}
	if err != nil {
		return b, err
	}
	n := len(o) - start - HeaderSize
	if uint64(n) > math.MaxUint32 {
		return b, fmt.Errorf("fuq: %s body of %d bytes does not fit arg0", m.Type, n)
	}
	binary.LittleEndian.PutUint32(o[start+12:], uint32(n))
	return o, nil
}

// ErrBodyTooLarge is returned (wrapped) by ReadMessage for a body longer
// than its limit. The body is left unread: the stream is out of step.
var ErrBodyTooLarge = errors.New("fuq: body too large")

// ProtocolError reports bytes that break the protocol: a wrong magic, an
// unknown type, a malformed body. For a body that msgpack could not decode,
// the error returned wraps both the *ProtocolError and msgp's error.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "fuq: protocol error: " + e.Msg }

// ReadMessage reads one message from r. A short read gives io.EOF when r
// ended before the message and io.ErrUnexpectedEOF when it ended inside it.
//
// For HELLO, JOB, UPDATE and CANCEL, arg0 is checked against maxBody
// (DefaultMaxBody when maxBody <= 0) before the body is allocated: a longer
// one gives an error matching ErrBodyTooLarge. The body is then decoded by
// DecodeBody. After a body error the returned Message still holds the
// header, so that the caller can answer its sequence number; the stream is
// in step after a decode error but not after ErrBodyTooLarge.
func ReadMessage(r io.Reader, maxBody int) (Message, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Message{}, err
	}
	h, err := ParseHeader(hb[:])
	if err != nil {
		return Message{}, err
	}
	if !h.Type.HasBody() {
		return Message{Header: h}, nil
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	if uint64(h.Arg0) > uint64(maxBody) {
		return Message{Header: h}, fmt.Errorf("%w: %s body of %d bytes, limit %d", ErrBodyTooLarge, h.Type, h.Arg0, maxBody)
	}
	body, err := readBody(r, int(h.Arg0))
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Message{}, err
	}
	m, err := DecodeBody(h.Type, body)
	m.Header = h
	return m, err
}

// bodyStep is the most a body is allocated ahead of the bytes that came: a
// peer that announces a large body and sends little of it makes the reader
// hold what it sent, not what it announced.
const bodyStep = 64 << 10

// readBody reads exactly n bytes, the buffer growing as they arrive.
func readBody(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, bodyStep))
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n-len(b), max(bodyStep, len(b))))
		}
		k, err := io.ReadAtLeast(r, b[len(b):min(n, cap(b))], 1)
		b = b[:len(b)+k]
		if err != nil && len(b) < n {
			return nil, err
		}
	}
	return b, nil
}

// DecodeBody decodes the body of a message of type t and returns a Message
// with only that body's field set.
//
// The body must be one msgpack value and nothing after it. It is first
// walked without allocating (msgp.Skip), which fails on any array or map
// that claims more elements than the bytes hold; then it is decoded, keys in
// any order and unknown keys skipped. Lists longer than 100000 elements and
// maps of more than 64 entries are refused. An empty or nil list decodes as
// a nil slice. An empty body is an empty Hello{} for HELLO (the spec lets a
// worker that runs nothing send arg0 = 0) and an error for the others.
//
// Every error is a *ProtocolError; when msgpack could not decode the body,
// the error also wraps msgp's error.
func DecodeBody(t Type, body []byte) (Message, error) {
	var m Message
	if !t.HasBody() {
		return m, &ProtocolError{Msg: t.String() + " has no body"}
	}
	if len(body) == 0 {
		if t == TypeHello {
			m.Hello = &Hello{}
			return m, nil
		}
		return m, &ProtocolError{Msg: "empty " + t.String() + " body"}
	}
	rest, err := msgp.Skip(body)
	if err != nil {
		return m, bodyError(t, err)
	}
	if len(rest) != 0 {
		return m, &ProtocolError{Msg: fmt.Sprintf("%s body followed by %d more bytes", t, len(rest))}
	}
	switch t {
	case TypeHello:
		var h Hello
		rest, err = h.UnmarshalMsg(body)
		m.Hello = &h
	case TypeJob:
		m.Tasks, rest, err = readTasks(body)
	case TypeUpdate:
		var u StatusUpdate
		rest, err = u.UnmarshalMsg(body)
		m.Update = &u
	case TypeCancel:
		m.Cancel, rest, err = readTaskPairs(body)
	}
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d bytes left", len(rest)) // Skip and the decoder disagree
	}
	if err != nil {
		return Message{}, bodyError(t, err)
	}
	return m, nil
}

// bodyError reports a body msgpack could not decode: a *ProtocolError that
// also wraps err.
func bodyError(t Type, err error) error {
	return &wrappedProtocolError{
		pe:  ProtocolError{Msg: "bad " + t.String() + " body: " + err.Error()},
		err: err,
	}
}

// wrappedProtocolError is a ProtocolError with the error behind it: errors.As
// finds the *ProtocolError, errors.Is and errors.As the cause.
type wrappedProtocolError struct {
	pe  ProtocolError
	err error
}

func (e *wrappedProtocolError) Error() string { return e.pe.Error() }
func (e *wrappedProtocolError) Unwrap() error { return e.err }

func (e *wrappedProtocolError) As(target any) bool {
	if p, ok := target.(**ProtocolError); ok {
		*p = &e.pe
		return true
	}
	return false
}
