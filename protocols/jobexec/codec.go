package jobexec

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Wire constants.
const (
	// Version is the newest request format this package speaks. A request
	// of version 2 or later is acknowledged with FrameAck as soon as it is
	// read; version 1 is the same request without the acknowledgement. A
	// job issued by a request of version 3 or later that did not succeed
	// has the end of its standard error sent too (FrameStderr); by one of
	// version 4 or later, when it did not exit by itself, why (FrameWhy).
	// A request of version 5 follows a hello (FrameHello) and the server's
	// challenge (FrameChallenge): each side proves it holds the token
	// without sending it, and the request carries its proof in the token's
	// place. A Client without a token sends version 4.
	Version = 5
	// MinVersion is the oldest request format a Server accepts.
	MinVersion = 1
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

// The frame types; doc.go says what each carries.
const (
	FrameRequest FrameType = 'Q'
	FrameAck     FrameType = 'A' // only in answer to a request of version 2 or later
	FrameLine    FrameType = 'L'
	FrameOutput  FrameType = 'O'
	FrameRefusal FrameType = 'R'
	FrameExit    FrameType = 'X'
	FrameStderr  FrameType = 'E' // only in answer to a request of version 3 or later
	FrameWhy     FrameType = 'W' // only in answer to a request of version 4 or later
	// FrameHello opens an exchange of version 5: a commander's nonce.
	FrameHello FrameType = 'H'
	// FrameChallenge answers FrameHello: the server's nonce and its proof.
	FrameChallenge FrameType = 'C'
)

func (t FrameType) valid() bool {
	switch t {
	case FrameRequest, FrameAck, FrameLine, FrameOutput, FrameRefusal, FrameExit, FrameStderr, FrameWhy,
		FrameHello, FrameChallenge:
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
	var payload []byte
	var err error
	if uint32(cap(buf)) >= n {
		payload = buf[:n]
		_, err = io.ReadFull(r, payload)
	} else {
		payload, err = readGrowing(r, int(n))
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return Frame{Type: t, Payload: payload}, nil
}

// growStep is the most a frame's payload is allocated ahead of the bytes
// that arrived: a peer that announces a large frame and sends it slowly,
// or never, makes the reader hold what it sent, not what it announced.
const growStep = 16 << 10

// readGrowing reads exactly n bytes, growing the buffer as they arrive.
func readGrowing(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, growStep))
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n-len(b), max(growStep, len(b))))
		}
		k, err := r.Read(b[len(b):min(n, cap(b))])
		b = b[:len(b)+k]
		if err != nil && len(b) < n {
			return nil, err
		}
	}
	return b, nil
}

// Request is a commander's command.
type Request struct {
	// Version is the request format, MinVersion to Version; 0 means Version.
	// A server acknowledges a request of version 2 or later (FrameAck).
	Version int
	// Token is the shared secret, "" when none is configured; in a request
	// of version 5, the commander's proof that it holds it (see Prove).
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
	v := q.Version
	if v == 0 {
		v = Version
	}
	if v < MinVersion || v > Version {
		return b, protocolErrorf("request version %d, this package speaks %d to %d", v, MinVersion, Version)
	}
	b = append(b, byte(v))
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
	if !knownVersion(p) {
		if len(p) == 0 {
			return Request{}, protocolErrorf("empty request")
		}
		return Request{}, protocolErrorf("request version %d, want %d to %d", p[0], MinVersion, Version)
	}
	version := int(p[0])
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
	q := Request{Version: version, Token: strs[0], Command: strs[1]}
	if len(strs) > 2 {
		q.Args = strs[2:]
	}
	return q, nil
}

// knownVersion reports whether request payload p starts with a version
// this package speaks.
func knownVersion(p []byte) bool {
	return len(p) > 0 && p[0] >= MinVersion && p[0] <= Version
}

// versionOf reports whether request payload p is of version v.
func versionOf(p []byte, v int) bool { return len(p) > 0 && int(p[0]) == v }

// wantsAck reports whether request payload p is of a version that this
// package speaks and that asks for FrameAck.
func wantsAck(p []byte) bool { return knownVersion(p) && p[0] >= 2 }

// wantsStderr reports whether request payload p is of a version that asks
// for FrameStderr.
func wantsStderr(p []byte) bool { return knownVersion(p) && p[0] >= 3 }

// wantsWhy reports whether request payload p is of a version that asks
// why an issued job did not exit by itself (FrameWhy).
func wantsWhy(p []byte) bool { return knownVersion(p) && p[0] >= 4 }

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

// NonceSize is the length of the nonces of a hello and a challenge.
const NonceSize = 32

// proofLabels keep a proof of one side from being taken for the other's.
const (
	serverProofLabel = "laboro jobexec server\x00"
	commanderLabel   = "laboro jobexec commander\x00"
)

// HelloPayload is the payload of a hello: the version it opens, then the
// commander's nonce.
func HelloPayload(version int, nonce []byte) []byte {
	return append([]byte{byte(version)}, nonce...)
}

// ParseHello decodes a hello's payload into its version and nonce.
func ParseHello(p []byte) (version int, nonce []byte, err error) {
	if len(p) != 1+NonceSize {
		return 0, nil, protocolErrorf("hello of %d bytes, want %d", len(p), 1+NonceSize)
	}
	if p[0] != Version {
		return 0, nil, protocolErrorf("hello of version %d, this package speaks %d", p[0], Version)
	}
	return int(p[0]), p[1:], nil
}

// ChallengePayload is the payload of a challenge: the server's nonce,
// then its proof over both nonces (ServerProof).
func ChallengePayload(nonce, proof []byte) []byte {
	return append(append(make([]byte, 0, len(nonce)+len(proof)), nonce...), proof...)
}

// ParseChallenge decodes a challenge's payload into the server's nonce and
// its proof.
func ParseChallenge(p []byte) (nonce, proof []byte, err error) {
	if len(p) != NonceSize+sha256.Size {
		return nil, nil, protocolErrorf("challenge of %d bytes, want %d", len(p), NonceSize+sha256.Size)
	}
	return p[:NonceSize], p[NonceSize:], nil
}

// ServerProof is a server's proof that it holds token, for the exchange
// of the commander's nonce c and the server's nonce s: HMAC-SHA256 keyed
// with the token.
func ServerProof(token string, c, s []byte) []byte {
	return mac(token, serverProofLabel, c, s)
}

// mac is HMAC-SHA256 keyed with token over label and then parts.
func mac(token, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(label))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// Prove returns q, of version 5, with its Token replaced by the
// commander's proof that it holds token: HMAC-SHA256 keyed with the token
// over both nonces and the request's payload with an empty token, so that
// the proof also vouches for the command and its arguments.
func (q Request) Prove(token string, c, s []byte) (Request, error) {
	q.Version, q.Token = Version, ""
	payload, err := q.AppendBinary(nil)
	if err != nil {
		return q, err
	}
	q.Token = string(mac(token, commanderLabel, c, s, payload))
	return q, nil
}

// Proven reports whether q, a request of version 5, carries the proof
// that its commander holds token, for the nonces c and s.
func (q Request) Proven(token string, c, s []byte) bool {
	want, err := q.Prove(token, c, s)
	return err == nil && q.Version == Version && hmac.Equal([]byte(q.Token), []byte(want.Token))
}
