package jobexec

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire constants of version 1.
const (
	// Version is the request format this package speaks.
	Version = 1
	// HeaderSize is the length of a frame header.
	HeaderSize = 5
	// DefaultMaxFrame is the largest payload a reader accepts unless told
	// otherwise: far above any command line, far below a memory problem.
	DefaultMaxFrame = 1 << 20
	// OutputChunk is the largest output payload a server sends.
	OutputChunk = 32 << 10
	// MaxRequestStrings bounds the strings of one request.
	MaxRequestStrings = 4096
)

// FrameType says what a frame carries.
type FrameType byte

// The frame types of version 1.
const (
	FrameRequest FrameType = 'Q'
	FrameLine    FrameType = 'L'
	FrameOutput  FrameType = 'O'
	FrameRefusal FrameType = 'R'
	FrameExit    FrameType = 'X'
)

func (t FrameType) valid() bool {
	switch t {
	case FrameRequest, FrameLine, FrameOutput, FrameRefusal, FrameExit:
		return true
	}
	return false
}

// String returns the type's letter, or its byte value when unknown.
func (t FrameType) String() string {
	if t.valid() {
		return string(rune(t))
	}
	return fmt.Sprintf("0x%02x", byte(t))
}

// ErrFrameTooLarge is returned for a frame whose length is above the limit.
var ErrFrameTooLarge = errors.New("jobexec: frame too large")

// ProtocolError reports malformed input. It unwraps to the underlying
// cause, if any.
type ProtocolError struct {
	Msg string
	Err error
}

func (e *ProtocolError) Error() string {
	if e.Err != nil {
		return "jobexec: " + e.Msg + ": " + e.Err.Error()
	}
	return "jobexec: " + e.Msg
}

func (e *ProtocolError) Unwrap() error { return e.Err }

func protocolErrorf(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// Frame is one decoded frame.
type Frame struct {
	Type    FrameType
	Payload []byte
}

// WriteFrame writes one frame. A payload above DefaultMaxFrame is refused,
// since no reader with the default limit would take it.
func WriteFrame(w io.Writer, t FrameType, payload []byte) error {
	if len(payload) > DefaultMaxFrame {
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(payload))
	}
	var hdr []byte
	if bw, ok := w.(*bufio.Writer); ok {
		hdr = bw.AvailableBuffer() // the header is built in place, unallocated
	}
	hdr = append(binary.BigEndian.AppendUint32(hdr, uint32(len(payload))), byte(t))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame whose payload is at most max bytes (max <= 0
// means DefaultMaxFrame). The length is checked before the payload is
// allocated. A stream that ends inside a frame gives io.ErrUnexpectedEOF;
// one that ends between frames, io.EOF.
func ReadFrame(r io.Reader, max int) (Frame, error) {
	return readFrame(r, max, nil)
}

// readFrame is ReadFrame reading the payload into buf when it has room;
// the payload is then valid until buf is reused.
func readFrame(r io.Reader, max int, buf []byte) (Frame, error) {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	if cap(buf) < HeaderSize {
		buf = make([]byte, HeaderSize)
	}
	hdr := buf[:HeaderSize] // parsed before the payload is read over it
	if _, err := io.ReadFull(r, hdr); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	t := FrameType(hdr[4])
	if !t.valid() {
		return Frame{}, protocolErrorf("unknown frame type %v", t)
	}
	if uint64(n) > uint64(max) {
		return Frame{}, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	payload := buf[:0]
	if uint32(cap(buf)) < n {
		payload = make([]byte, n)
	}
	payload = payload[:n]
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return Frame{Type: t, Payload: payload}, nil
}

// Request is a commander's command.
type Request struct {
	// Token is the shared secret, "" when none is configured.
	Token string
	// Command is one of issueJob, setConcurrency, stop, poll, exit.
	Command string
	// Args are the command's arguments as the user typed them.
	Args []string
}

// AppendBinary appends the request's payload to b.
func (q Request) AppendBinary(b []byte) ([]byte, error) {
	if 2+len(q.Args) > MaxRequestStrings {
		return b, protocolErrorf("request has %d arguments, at most %d", len(q.Args), MaxRequestStrings-2)
	}
	b = append(b, Version)
	b = binary.AppendUvarint(b, uint64(2+len(q.Args)))
	for _, s := range append([]string{q.Token, q.Command}, q.Args...) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b, nil
}

// ParseRequest decodes a request payload. Every count and length is checked
// against what the payload still holds before anything is allocated.
func ParseRequest(p []byte) (Request, error) {
	if len(p) == 0 || p[0] != Version {
		if len(p) == 0 {
			return Request{}, protocolErrorf("empty request")
		}
		return Request{}, protocolErrorf("request version %d, want %d", p[0], Version)
	}
	p = p[1:]
	count, n := binary.Uvarint(p)
	if n <= 0 {
		return Request{}, protocolErrorf("bad string count")
	}
	p = p[n:]
	// Each string takes at least one byte (its length), so a count above
	// what is left cannot be honest.
	if count < 2 || count > MaxRequestStrings || count > uint64(len(p)) {
		return Request{}, protocolErrorf("request claims %d strings in %d bytes", count, len(p))
	}
	strs := make([]string, count)
	for i := range strs {
		l, n := binary.Uvarint(p)
		if n <= 0 {
			return Request{}, protocolErrorf("bad length of string %d", i)
		}
		p = p[n:]
		if l > uint64(len(p)) {
			return Request{}, protocolErrorf("string %d claims %d bytes, %d left", i, l, len(p))
		}
		strs[i], p = string(p[:l]), p[l:]
	}
	if len(p) != 0 {
		return Request{}, protocolErrorf("%d bytes after the last string", len(p))
	}
	q := Request{Token: strs[0], Command: strs[1]}
	if len(strs) > 2 {
		q.Args = strs[2:]
	}
	return q, nil
}

// ExitPayload encodes an exit status.
func ExitPayload(code int) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(int32(code)))
}

// ParseExit decodes an exit frame's payload.
func ParseExit(p []byte) (int, error) {
	if len(p) != 4 {
		return 0, protocolErrorf("exit payload of %d bytes, want 4", len(p))
	}
	return int(int32(binary.BigEndian.Uint32(p))), nil
}
