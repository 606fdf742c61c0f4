package pulse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
)

// The wire: every protobuf message is preceded by its length as a u64,
// little-endian; a ControlMsg or a WorkerResponse is followed by exactly
// extra_size raw bytes. A connection carries one request and one response.
//
// The Go messages (package pulsepb) always carry the spec's enum numbers;
// a Codec translates them to and from the numbering spoken on the wire.

// Numbering selects the enum numbers spoken on the wire.
type Numbering uint8

const (
	// SpecNumbering is the spec's: PULSE_REGISTER = 0, PULSE_OK = 1, …,
	// with its optional fields (PulseResponse.worker_id,
	// ControlMsg.task_id) present on the wire whenever they are set.
	SpecNumbering Numbering = iota
	// LaterNumbering is the reference's later one, in which every enum
	// starts with INVALID = 0: PULSE_OK = 1, PULSE_REGISTER = 2,
	// PULSE_FETCH_ME = 3, PULSE_SHUTDOWN = 4, and the spec's value + 1 for
	// the other enums. It has no optional fields: a zero is not sent, and
	// an optional field is set when read only if it is not zero.
	LaterNumbering
)

// String returns "spec" or "later".
func (n Numbering) String() string {
	switch n {
	case SpecNumbering:
		return "spec"
	case LaterNumbering:
		return "later"
	}
	return "Numbering(" + strconv.Itoa(int(n)) + ")"
}

// Limits bound what a reader accepts; zero fields mean the defaults.
type Limits struct {
	MaxMessage uint64 // a protobuf message's length; default DefaultMaxMessage (4 KiB)
	MaxExtra   uint64 // extra bytes after a ControlMsg or WorkerResponse; default DefaultMaxExtra (64 MiB)
}

// The default limits.
const (
	DefaultMaxMessage = 4 << 10
	DefaultMaxExtra   = 64 << 20
)

// ErrTooLarge is returned (wrapped, for errors.Is) for a length over a
// limit: a message's length prefix over Limits.MaxMessage, or an
// extra_size over Limits.MaxExtra. It is refused before anything is
// allocated for it; the stream is then out of step and the connection
// should be closed.
var ErrTooLarge = errors.New("pulse: length over the limit")

// ProtocolError reports bytes that break the protocol: a message protobuf
// cannot decode, or an enum value that has no meaning in the numbering
// (INVALID = 0 in LaterNumbering, or a number past the last value in
// either), whose *EnumError is then in Err. AppendMessage refuses an
// unknown enum value in a Go message with one too.
type ProtocolError struct {
	Msg string
	Err error // the cause, if any: an *EnumError for an unknown enum value read
}

func (e *ProtocolError) Error() string { return "pulse: protocol error: " + e.Msg }

// Unwrap returns Err.
func (e *ProtocolError) Unwrap() error { return e.Err }

// EnumError is the cause (ProtocolError.Err) of an enum value read that
// has no meaning in the numbering it was read in. Value is the number as
// it was on the wire: a peer that speaks the other numbering sends
// numbers that one numbering lacks (0, which the later numbering calls
// INVALID, is the spec's PULSE_REGISTER, CTRL_ERR_OK, …), so a caller may
// tell what it would mean there.
type EnumError struct {
	Message   string    // "WorkerPulse", "PulseResponse", "ControlMsg" or "WorkerResponse"
	Field     string    // "type" or "error"
	Value     int32     // the number on the wire
	Numbering Numbering // the numbering it was read in
}

func (e *EnumError) Error() string {
	return fmt.Sprintf("%s with %s %d, unknown in the %v numbering", e.Message, e.Field, e.Value, e.Numbering)
}

// Codec encodes and decodes the four messages in one numbering, with
// limits. The zero value is the spec numbering with default limits. A
// Codec starts no goroutines and is safe for concurrent use.
type Codec struct {
	Numbering Numbering
	Limits    Limits
}

func (c Codec) maxMessage() uint64 {
	if c.Limits.MaxMessage == 0 {
		return DefaultMaxMessage
	}
	return c.Limits.MaxMessage
}

func (c Codec) maxExtra() uint64 {
	if c.Limits.MaxExtra == 0 {
		return DefaultMaxExtra
	}
	return c.Limits.MaxExtra
}

// checkNumbering refuses a Numbering that is neither of the two.
func (c Codec) checkNumbering() error {
	if c.Numbering > LaterNumbering {
		return fmt.Errorf("pulse: unknown numbering %v", c.Numbering)
	}
	return nil
}

// tooLarge is the error matching ErrTooLarge; it formats its message only
// when asked, so that refusing a huge length costs one small allocation.
type tooLarge struct {
	what     string
	n, limit uint64
}

func (e *tooLarge) Error() string {
	return fmt.Sprintf("%v: %s of %d bytes, limit %d", ErrTooLarge, e.what, e.n, e.limit)
}

func (e *tooLarge) Is(target error) bool { return target == ErrTooLarge }

// The enums' translation. Each enum has spec values 0..count-1 (the Go
// constants); in the later numbering 0 is INVALID and the values are the
// spec's + 1, except PulseType, whose REGISTER and OK swapped places.
const (
	pulseTypes       = 4
	controllerErrors = 4
	controlTypes     = 4
	workerErrors     = 5
)

// pulseTypeToLater[spec] is PulseType's later number; pulseTypeFromLater
// is its inverse, with -1 for INVALID.
var (
	pulseTypeToLater   = [pulseTypes]int32{2, 1, 3, 4}
	pulseTypeFromLater = [pulseTypes + 1]int32{-1, 1, 0, 2, 3}
)

// toWire returns the wire number of the spec value v of an enum with count
// values (pulse: whether it is PulseType), or ok false for a value the
// enum does not have.
func (c Codec) toWire(v int32, count int32, pulse bool) (int32, bool) {
	if v < 0 || v >= count {
		return 0, false
	}
	if c.Numbering == SpecNumbering {
		return v, true
	}
	if pulse {
		return pulseTypeToLater[v], true
	}
	return v + 1, true
}

// fromWire is toWire's inverse: the spec value of the wire number w.
func (c Codec) fromWire(w int32, count int32, pulse bool) (int32, bool) {
	if c.Numbering == SpecNumbering {
		return w, w >= 0 && w < count
	}
	if w < 1 || w > count {
		return 0, false
	}
	if pulse {
		return pulseTypeFromLater[w], true
	}
	return w - 1, true
}

// AppendMessage appends m — a *pulsepb.WorkerPulse, PulseResponse,
// ControlMsg or WorkerResponse — to b as it goes on the wire: its length
// as a u64, little-endian, then the protobuf bytes, with the enums in
// c.Numbering. In LaterNumbering, optional fields holding 0 are omitted.
// The fields go in field-number order, followed by the message's unknown
// fields if it has any: in SpecNumbering the bytes are those of
// proto.Marshal. An enum value the spec does not define is refused with a
// *ProtocolError. The extra bytes of a ControlMsg or WorkerResponse are
// the caller's to write.
func (c Codec) AppendMessage(b []byte, m proto.Message) ([]byte, error) {
	if err := c.checkNumbering(); err != nil {
		return b, err
	}
	start := len(b)
	o := append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	var ok bool
	switch x := m.(type) {
	case *pulsepb.WorkerPulse:
		var t int32
		if t, ok = c.toWire(int32(x.GetType()), pulseTypes, true); !ok {
			return b, &ProtocolError{Msg: "WorkerPulse with unknown type " + strconv.Itoa(int(x.GetType()))}
		}
		o = appendVarint(o, 1, uint64(t))
		o = appendVarint(o, 2, x.GetWorkerId())
		o = appendVarint(o, 3, x.GetTaskId())
		o = appendVarint(o, 4, x.GetNextPulse())
	case *pulsepb.PulseResponse:
		var e int32
		if e, ok = c.toWire(int32(x.GetError()), controllerErrors, false); !ok {
			return b, &ProtocolError{Msg: "PulseResponse with unknown error " + strconv.Itoa(int(x.GetError()))}
		}
		o = appendVarint(o, 1, uint64(e))
		if x != nil {
			o = c.appendOptional(o, 2, x.WorkerId)
		}
	case *pulsepb.ControlMsg:
		var t int32
		if t, ok = c.toWire(int32(x.GetType()), controlTypes, false); !ok {
			return b, &ProtocolError{Msg: "ControlMsg with unknown type " + strconv.Itoa(int(x.GetType()))}
		}
		o = appendVarint(o, 1, uint64(t))
		o = appendVarint(o, 2, x.GetExtraSize())
		if x != nil {
			o = c.appendOptional(o, 3, x.TaskId)
		}
	case *pulsepb.WorkerResponse:
		var e int32
		if e, ok = c.toWire(int32(x.GetError()), workerErrors, false); !ok {
			return b, &ProtocolError{Msg: "WorkerResponse with unknown error " + strconv.Itoa(int(x.GetError()))}
		}
		o = appendVarint(o, 1, uint64(e))
		o = appendVarint(o, 2, x.GetTaskId())
		o = appendVarint(o, 3, x.GetExtraSize())
	default:
		return b, fmt.Errorf("pulse: cannot encode %T", m)
	}
	if r := m.ProtoReflect(); r.IsValid() {
		o = append(o, r.GetUnknown()...)
	}
	binary.LittleEndian.PutUint64(o[start:], uint64(len(o)-start-8))
	return o, nil
}

// appendVarint appends field num holding v unless v is 0 (proto3's
// implicit presence).
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendOptional appends the optional field num: whenever it is set in
// SpecNumbering, and when it is not 0 in LaterNumbering, which has no
// optional fields.
func (c Codec) appendOptional(b []byte, num protowire.Number, p *uint64) []byte {
	if p == nil {
		return b
	}
	if c.Numbering == LaterNumbering {
		return appendVarint(b, num, *p)
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, *p)
}

// WriteMessage writes AppendMessage's bytes for m to w in one Write.
func (c Codec) WriteMessage(w io.Writer, m proto.Message) error {
	var a [64]byte
	b, err := c.AppendMessage(a[:0], m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// smallBuf holds the length prefix and a message of up to
// smallBuf-8 bytes, which every message without unknown fields fits; the
// readers take them from a pool. Unmarshal copies what it keeps (the
// messages have no bytes fields; unknown fields are copied), so a buffer
// is free again once decoded.
const smallBuf = 128

var bufPool = sync.Pool{New: func() any { return new([smallBuf]byte) }}

// readMessage reads one length-prefixed message from r and decodes it into
// m with decode. Nothing is read past the message.
func (c Codec) readMessage(r io.Reader, what string, decode func([]byte) error) error {
	if err := c.checkNumbering(); err != nil {
		return err
	}
	buf := bufPool.Get().(*[smallBuf]byte)
	defer bufPool.Put(buf)
	if _, err := io.ReadFull(r, buf[:8]); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(buf[:8])
	if limit := c.maxMessage(); n > limit {
		return &tooLarge{what: what, n: n, limit: limit}
	}
	var body []byte
	if n <= smallBuf-8 {
		body = buf[8 : 8+n]
	} else {
		body = make([]byte, n)
	}
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return decode(body)
}

// The readers read one message: its 8-byte length, checked against
// Limits.MaxMessage before anything is allocated for it (ErrTooLarge), then
// its bytes, decoded as by the matching Decode method. A stream that ends
// before the message gives io.EOF; one that ends inside it,
// io.ErrUnexpectedEOF. Nothing past the message is read.

// ReadPulse reads a WorkerPulse.
func (c Codec) ReadPulse(r io.Reader) (*pulsepb.WorkerPulse, error) {
	var m *pulsepb.WorkerPulse
	err := c.readMessage(r, "WorkerPulse", func(b []byte) (err error) {
		m, err = c.DecodePulse(b)
		return err
	})
	return m, err
}

// ReadPulseResponse reads a PulseResponse.
func (c Codec) ReadPulseResponse(r io.Reader) (*pulsepb.PulseResponse, error) {
	var m *pulsepb.PulseResponse
	err := c.readMessage(r, "PulseResponse", func(b []byte) (err error) {
		m, err = c.DecodePulseResponse(b)
		return err
	})
	return m, err
}

// ReadControl reads a ControlMsg but not the extra bytes after it (see
// ReadExtra). An ExtraSize over Limits.MaxExtra gives ErrTooLarge together
// with the message, so that the caller may still answer.
func (c Codec) ReadControl(r io.Reader) (*pulsepb.ControlMsg, error) {
	var m *pulsepb.ControlMsg
	err := c.readMessage(r, "ControlMsg", func(b []byte) (err error) {
		m, err = c.DecodeControl(b)
		return err
	})
	return m, err
}

// ReadWorkerResponse reads a WorkerResponse but not the extra bytes after
// it (see ReadExtra). An ExtraSize over Limits.MaxExtra gives ErrTooLarge
// together with the message.
func (c Codec) ReadWorkerResponse(r io.Reader) (*pulsepb.WorkerResponse, error) {
	var m *pulsepb.WorkerResponse
	err := c.readMessage(r, "WorkerResponse", func(b []byte) (err error) {
		m, err = c.DecodeWorkerResponse(b)
		return err
	})
	return m, err
}

// ReadExtra copies exactly n extra bytes from r to w (io.CopyN), n being
// the ExtraSize of a message ReadControl or ReadWorkerResponse has checked
// against the limit. A stream that ends early gives io.ErrUnexpectedEOF.
func (c Codec) ReadExtra(r io.Reader, w io.Writer, n uint64) error {
	if n > math.MaxInt64 {
		return &tooLarge{what: "extra", n: n, limit: math.MaxInt64}
	}
	_, err := io.CopyN(w, r, int64(n))
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// The decoders parse one message's bytes, without the length prefix: the
// protobuf bytes (proto.Unmarshal, unknown fields kept), then the enums,
// translated from c.Numbering to the spec's numbering of the Go constants.
// An enum value without a meaning in c.Numbering — INVALID (0, which is
// also what an absent enum field decodes as) in LaterNumbering, a number
// past the last value in either — is a *ProtocolError whose Err is an
// *EnumError; bytes protobuf cannot decode are a *ProtocolError too. In LaterNumbering an optional field read as 0 is
// left unset. They apply the readers' limits too: more than
// Limits.MaxMessage bytes, or an ExtraSize over Limits.MaxExtra (returned
// with the message), give ErrTooLarge.

func (c Codec) unmarshal(b []byte, m proto.Message, what string) error {
	if err := c.checkNumbering(); err != nil {
		return err
	}
	if limit := c.maxMessage(); uint64(len(b)) > limit {
		return &tooLarge{what: what, n: uint64(len(b)), limit: limit}
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return &ProtocolError{Msg: what + ": " + err.Error()}
	}
	return nil
}

func unknownEnum(what, field string, w int32, n Numbering) error {
	e := &EnumError{Message: what, Field: field, Value: w, Numbering: n}
	return &ProtocolError{Msg: e.Error(), Err: e}
}

// DecodePulse parses a WorkerPulse.
func (c Codec) DecodePulse(b []byte) (*pulsepb.WorkerPulse, error) {
	m := new(pulsepb.WorkerPulse)
	if err := c.unmarshal(b, m, "WorkerPulse"); err != nil {
		return nil, err
	}
	t, ok := c.fromWire(int32(m.Type), pulseTypes, true)
	if !ok {
		return nil, unknownEnum("WorkerPulse", "type", int32(m.Type), c.Numbering)
	}
	m.Type = pulsepb.PulseType(t)
	return m, nil
}

// DecodePulseResponse parses a PulseResponse.
func (c Codec) DecodePulseResponse(b []byte) (*pulsepb.PulseResponse, error) {
	m := new(pulsepb.PulseResponse)
	if err := c.unmarshal(b, m, "PulseResponse"); err != nil {
		return nil, err
	}
	e, ok := c.fromWire(int32(m.Error), controllerErrors, false)
	if !ok {
		return nil, unknownEnum("PulseResponse", "error", int32(m.Error), c.Numbering)
	}
	m.Error = pulsepb.ControllerError(e)
	if c.Numbering == LaterNumbering && m.WorkerId != nil && *m.WorkerId == 0 {
		m.WorkerId = nil
	}
	return m, nil
}

// DecodeControl parses a ControlMsg.
func (c Codec) DecodeControl(b []byte) (*pulsepb.ControlMsg, error) {
	m := new(pulsepb.ControlMsg)
	if err := c.unmarshal(b, m, "ControlMsg"); err != nil {
		return nil, err
	}
	t, ok := c.fromWire(int32(m.Type), controlTypes, false)
	if !ok {
		return nil, unknownEnum("ControlMsg", "type", int32(m.Type), c.Numbering)
	}
	m.Type = pulsepb.ControlType(t)
	if c.Numbering == LaterNumbering && m.TaskId != nil && *m.TaskId == 0 {
		m.TaskId = nil
	}
	if limit := c.maxExtra(); m.ExtraSize > limit {
		return m, &tooLarge{what: "ControlMsg extra", n: m.ExtraSize, limit: limit}
	}
	return m, nil
}

// DecodeWorkerResponse parses a WorkerResponse.
func (c Codec) DecodeWorkerResponse(b []byte) (*pulsepb.WorkerResponse, error) {
	m := new(pulsepb.WorkerResponse)
	if err := c.unmarshal(b, m, "WorkerResponse"); err != nil {
		return nil, err
	}
	e, ok := c.fromWire(int32(m.Error), workerErrors, false)
	if !ok {
		return nil, unknownEnum("WorkerResponse", "error", int32(m.Error), c.Numbering)
	}
	m.Error = pulsepb.WorkerError(e)
	if limit := c.maxExtra(); m.ExtraSize > limit {
		return m, &tooLarge{what: "WorkerResponse extra", n: m.ExtraSize, limit: limit}
	}
	return m, nil
}
