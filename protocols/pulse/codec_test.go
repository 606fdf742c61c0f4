package pulse

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
)

var (
	codecSpec  = Codec{Numbering: SpecNumbering}
	codecLater = Codec{Numbering: LaterNumbering}
	codecBoth  = []Codec{codecSpec, codecLater}
)

func codecHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// codecFrame returns body with its u64 little-endian length prefix.
func codecFrame(body []byte) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(body))), body...)
}

// codecDecode decodes body as a message of m's type.
func codecDecode(c Codec, m proto.Message, body []byte) (proto.Message, error) {
	switch m.(type) {
	case *pulsepb.WorkerPulse:
		return c.DecodePulse(body)
	case *pulsepb.PulseResponse:
		return c.DecodePulseResponse(body)
	case *pulsepb.ControlMsg:
		return c.DecodeControl(body)
	case *pulsepb.WorkerResponse:
		return c.DecodeWorkerResponse(body)
	}
	panic("not a pulse message")
}

// codecRead reads a framed message of m's type from r.
func codecRead(c Codec, m proto.Message, r io.Reader) (proto.Message, error) {
	switch m.(type) {
	case *pulsepb.WorkerPulse:
		return c.ReadPulse(r)
	case *pulsepb.PulseResponse:
		return c.ReadPulseResponse(r)
	case *pulsepb.ControlMsg:
		return c.ReadControl(r)
	case *pulsepb.WorkerResponse:
		return c.ReadWorkerResponse(r)
	}
	panic("not a pulse message")
}

func isProtocolError(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe)
}

// The vectors of WIRE-NOTES.md, in the reference's later numbering, and
// the same messages in the spec's numbering, derived by hand:
//
//   - REGISTER with next_pulse 60: later 08 02 (type = 2) 20 3c (field 4 =
//     60); in the spec REGISTER is 0, which proto3 does not send (implicit
//     presence), leaving only 20 3c.
//   - SET_TASK, extra_size 30, task_id 1: later 08 03 10 1e 18 01; in the
//     spec SET_TASK is 2: 08 02 10 1e 18 01.
//   - PulseResponse OK with worker_id 1: later 08 01 10 01; in the spec OK
//     is 0, not sent, and worker_id, optional, is sent because it is set:
//     10 01.
var codecGolden = []struct {
	name         string
	msg          proto.Message
	later, spec  string
	laterEqualTo proto.Message // what the later bytes decode to, when not msg
}{
	{
		name:  "REGISTER pulse",
		msg:   &pulsepb.WorkerPulse{Type: pulsepb.PulseType_PULSE_REGISTER, NextPulse: 60},
		later: "0802203c",
		spec:  "203c",
	},
	{
		name:  "SET_TASK",
		msg:   &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_SET_TASK, ExtraSize: 30, TaskId: proto.Uint64(1)},
		later: "0803101e1801",
		spec:  "0802101e1801",
	},
	{
		name:  "PulseResponse OK",
		msg:   &pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_OK, WorkerId: proto.Uint64(1)},
		later: "08011001",
		spec:  "1001",
	},
}

func TestCodecGolden(t *testing.T) {
	for _, g := range codecGolden {
		for _, tc := range []struct {
			c    Codec
			want string
		}{{codecLater, g.later}, {codecSpec, g.spec}} {
			t.Run(g.name+"/"+tc.c.Numbering.String(), func(t *testing.T) {
				want := codecHex(t, tc.want)
				enc, err := tc.c.AppendMessage(nil, g.msg)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(enc, codecFrame(want)) {
					t.Errorf("encodes as %x, want %x", enc, codecFrame(want))
				}
				got, err := codecDecode(tc.c, g.msg, want)
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, g.msg) {
					t.Errorf("%x decodes as %v, want %v", want, got, g.msg)
				}
				got, err = codecRead(tc.c, g.msg, bytes.NewReader(codecFrame(want)))
				if err != nil || !proto.Equal(got, g.msg) {
					t.Errorf("read %v, %v; want %v", got, err, g.msg)
				}
				if tc.c.Numbering == SpecNumbering {
					pb, err := proto.MarshalOptions{Deterministic: true}.Marshal(g.msg)
					if err != nil || !bytes.Equal(pb, want) {
						t.Errorf("proto.Marshal gives %x, %v; want %x", pb, err, want)
					}
				}
			})
		}
	}
}

// The enums' later numbers, from WIRE-NOTES.md, indexed by the spec's.
var (
	laterPulseType       = map[pulsepb.PulseType]byte{pulsepb.PulseType_PULSE_REGISTER: 2, pulsepb.PulseType_PULSE_OK: 1, pulsepb.PulseType_PULSE_FETCH_ME: 3, pulsepb.PulseType_PULSE_SHUTDOWN: 4}
	laterControllerError = map[pulsepb.ControllerError]byte{pulsepb.ControllerError_CTRL_ERR_OK: 1, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_TYPE: 2, pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID: 3, pulsepb.ControllerError_CTRL_ERR_FAILED: 4}
	laterControlType     = map[pulsepb.ControlType]byte{pulsepb.ControlType_CTRL_RESTART: 1, pulsepb.ControlType_CTRL_FETCH: 2, pulsepb.ControlType_CTRL_SET_TASK: 3, pulsepb.ControlType_CTRL_GET_STATUS: 4}
	laterWorkerError     = map[pulsepb.WorkerError]byte{pulsepb.WorkerError_WORKER_ERR_OK: 1, pulsepb.WorkerError_WORKER_ERR_NO_FETCH: 2, pulsepb.WorkerError_WORKER_ERR_BUSY: 3, pulsepb.WorkerError_WORKER_ERR_TASK_FAILED: 4, pulsepb.WorkerError_WORKER_ERR_FAILED: 5}
)

// TestCodecEnums checks every enum value's number on the wire in both
// numberings: a message holding only that value encodes as field 1 with
// the number (nothing for the spec's 0) and decodes back to the value.
func TestCodecEnums(t *testing.T) {
	type enumCase struct {
		msg        proto.Message
		spec       int32
		later      byte
		enumValues int // how many values the generated enum has
	}
	var cases []enumCase
	for v, l := range laterPulseType {
		cases = append(cases, enumCase{&pulsepb.WorkerPulse{Type: v}, int32(v), l, len(pulsepb.PulseType_name)})
	}
	for v, l := range laterControllerError {
		cases = append(cases, enumCase{&pulsepb.PulseResponse{Error: v}, int32(v), l, len(pulsepb.ControllerError_name)})
	}
	for v, l := range laterControlType {
		cases = append(cases, enumCase{&pulsepb.ControlMsg{Type: v}, int32(v), l, len(pulsepb.ControlType_name)})
	}
	for v, l := range laterWorkerError {
		cases = append(cases, enumCase{&pulsepb.WorkerResponse{Error: v}, int32(v), l, len(pulsepb.WorkerError_name)})
	}
	if len(cases) != 4+4+4+5 {
		t.Fatalf("%d enum values", len(cases))
	}
	for _, tc := range cases {
		if tc.enumValues != 4 && tc.enumValues != 5 || int(tc.later) > tc.enumValues {
			t.Fatalf("%T: the generated enum has %d values", tc.msg, tc.enumValues)
		}
		for _, c := range codecBoth {
			want := []byte{0x08, tc.later}
			if c.Numbering == SpecNumbering {
				want = []byte{0x08, byte(tc.spec)}
				if tc.spec == 0 {
					want = nil
				}
			}
			enc, err := c.AppendMessage(nil, tc.msg)
			if err != nil {
				t.Fatalf("%v %v: %v", c.Numbering, tc.msg, err)
			}
			if !bytes.Equal(enc[8:], want) {
				t.Errorf("%v {%v}: %x, want %x", c.Numbering, tc.msg, enc[8:], want)
			}
			got, err := codecDecode(c, tc.msg, want)
			if err != nil || !proto.Equal(got, tc.msg) {
				t.Errorf("%v %x: %v, %v; want %v", c.Numbering, want, got, err, tc.msg)
			}
		}
	}
}

// codecMessages returns messages of every type with every enum value and
// the optional fields unset, set to 0 and set to a value.
func codecMessages() []proto.Message {
	var ms []proto.Message
	opts := []*uint64{nil, proto.Uint64(0), proto.Uint64(7), proto.Uint64(math.MaxUint64)}
	for v := range laterPulseType {
		ms = append(ms,
			&pulsepb.WorkerPulse{Type: v},
			&pulsepb.WorkerPulse{Type: v, WorkerId: 3, TaskId: 1, NextPulse: 60},
			&pulsepb.WorkerPulse{Type: v, WorkerId: math.MaxUint64, TaskId: math.MaxUint64, NextPulse: math.MaxUint64})
	}
	for v := range laterControllerError {
		for _, o := range opts {
			ms = append(ms, &pulsepb.PulseResponse{Error: v, WorkerId: o})
		}
	}
	for v := range laterControlType {
		for _, o := range opts {
			ms = append(ms,
				&pulsepb.ControlMsg{Type: v, TaskId: o},
				&pulsepb.ControlMsg{Type: v, ExtraSize: 16, TaskId: o},
				&pulsepb.ControlMsg{Type: v, ExtraSize: DefaultMaxExtra, TaskId: o})
		}
	}
	for v := range laterWorkerError {
		ms = append(ms,
			&pulsepb.WorkerResponse{Error: v},
			&pulsepb.WorkerResponse{Error: v, TaskId: 5, ExtraSize: 16},
			&pulsepb.WorkerResponse{Error: v, TaskId: math.MaxUint64, ExtraSize: DefaultMaxExtra})
	}
	return ms
}

// codecWant is what m becomes through c: the same message, except that
// the later numbering, which has no optional fields, leaves a 0 unset.
func codecWant(c Codec, m proto.Message) proto.Message {
	m = proto.Clone(m)
	if c.Numbering == LaterNumbering {
		switch x := m.(type) {
		case *pulsepb.PulseResponse:
			if x.GetWorkerId() == 0 {
				x.WorkerId = nil
			}
		case *pulsepb.ControlMsg:
			if x.GetTaskId() == 0 {
				x.TaskId = nil
			}
		}
	}
	return m
}

func TestCodecRoundTrip(t *testing.T) {
	for _, c := range codecBoth {
		for _, m := range codecMessages() {
			enc, err := c.AppendMessage([]byte("prefix"), m)
			if err != nil {
				t.Fatalf("%v %v: %v", c.Numbering, m, err)
			}
			if string(enc[:6]) != "prefix" {
				t.Fatalf("AppendMessage changed b: %q", enc[:6])
			}
			enc = enc[6:]
			if n := binary.LittleEndian.Uint64(enc); n != uint64(len(enc)-8) {
				t.Fatalf("%v %v: length %d for %d bytes", c.Numbering, m, n, len(enc)-8)
			}
			if c.Numbering == SpecNumbering {
				pb, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
				if err != nil || !bytes.Equal(pb, enc[8:]) {
					t.Errorf("spec %v: %x, proto.Marshal %x, %v", m, enc[8:], pb, err)
				}
			}
			want := codecWant(c, m)
			got, err := codecDecode(c, m, enc[8:])
			if err != nil || !proto.Equal(got, want) {
				t.Errorf("%v %v: decodes as %v, %v", c.Numbering, m, got, err)
			}
			r := bytes.NewReader(append(enc, "next"...))
			got, err = codecRead(c, m, r)
			if err != nil || !proto.Equal(got, want) {
				t.Errorf("%v %v: reads as %v, %v", c.Numbering, m, got, err)
			}
			if rest, _ := io.ReadAll(r); string(rest) != "next" {
				t.Errorf("%v %v: read past the message, leaving %q", c.Numbering, m, rest)
			}
			var w bytes.Buffer
			if err := c.WriteMessage(&w, m); err != nil || !bytes.Equal(w.Bytes(), enc) {
				t.Errorf("%v %v: WriteMessage wrote %x, %v; want %x", c.Numbering, m, w.Bytes(), err, enc)
			}
		}
	}
}

// TestCodecLaterOptional: the later numbering sends no optional 0 and
// reads an explicit 0 as unset; the spec's sends a set 0 and reads it back
// as set.
func TestCodecLaterOptional(t *testing.T) {
	m := &pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID, WorkerId: proto.Uint64(0)}
	enc, _ := codecLater.AppendMessage(nil, m)
	if got := hex.EncodeToString(enc[8:]); got != "0803" {
		t.Errorf("later: %s, want 0803", got)
	}
	enc, _ = codecSpec.AppendMessage(nil, m)
	if got := hex.EncodeToString(enc[8:]); got != "08021000" {
		t.Errorf("spec: %s, want 08021000", got)
	}
	got, err := codecLater.DecodePulseResponse(codecHex(t, "08031000"))
	if err != nil || got.WorkerId != nil || got.Error != pulsepb.ControllerError_CTRL_ERR_UNKNOWN_ID {
		t.Errorf("later 08031000: %v, %v", got, err)
	}
	got, err = codecSpec.DecodePulseResponse(codecHex(t, "08021000"))
	if err != nil || got.WorkerId == nil || *got.WorkerId != 0 {
		t.Errorf("spec 08021000: %v, %v", got, err)
	}
	c, err := codecLater.DecodeControl(codecHex(t, "08011800"))
	if err != nil || c.TaskId != nil || c.Type != pulsepb.ControlType_CTRL_RESTART {
		t.Errorf("later 08011800: %v, %v", c, err)
	}
}

func TestCodecUnknownEnum(t *testing.T) {
	neg := "08ffffffffffffffffff01" // field 1 = -1
	for _, tc := range []struct {
		c    Codec
		msg  proto.Message
		body string
	}{
		// A number past the last value, in either numbering.
		{codecSpec, &pulsepb.WorkerPulse{}, "0809"},
		{codecLater, &pulsepb.WorkerPulse{}, "0809"},
		{codecSpec, &pulsepb.WorkerPulse{}, "0804"},
		{codecLater, &pulsepb.WorkerPulse{}, "0805"},
		{codecSpec, &pulsepb.PulseResponse{}, "0804"},
		{codecLater, &pulsepb.PulseResponse{}, "0805"},
		{codecSpec, &pulsepb.ControlMsg{}, "0804"},
		{codecLater, &pulsepb.ControlMsg{}, "0805"},
		{codecSpec, &pulsepb.WorkerResponse{}, "0805"},
		{codecLater, &pulsepb.WorkerResponse{}, "0806"},
		{codecSpec, &pulsepb.WorkerResponse{}, "0809"},
		{codecLater, &pulsepb.WorkerResponse{}, "0809"},
		{codecSpec, &pulsepb.ControlMsg{}, neg},
		{codecLater, &pulsepb.ControlMsg{}, neg},
		// INVALID, explicit or absent, in the later numbering.
		{codecLater, &pulsepb.WorkerPulse{}, "0800"},
		{codecLater, &pulsepb.WorkerPulse{}, "203c"},
		{codecLater, &pulsepb.PulseResponse{}, ""},
		{codecLater, &pulsepb.PulseResponse{}, "1001"},
		{codecLater, &pulsepb.ControlMsg{}, "101e1801"},
		{codecLater, &pulsepb.WorkerResponse{}, "0800"},
	} {
		body := codecHex(t, tc.body)
		if m, err := codecDecode(tc.c, tc.msg, body); !isProtocolError(err) {
			t.Errorf("%v %T %s: %v, %v; want a *ProtocolError", tc.c.Numbering, tc.msg, tc.body, m, err)
		}
		if m, err := codecRead(tc.c, tc.msg, bytes.NewReader(codecFrame(body))); !isProtocolError(err) {
			t.Errorf("%v %T %s read: %v, %v; want a *ProtocolError", tc.c.Numbering, tc.msg, tc.body, m, err)
		}
	}
	// The spec's own numbers are valid in it: an absent enum is its 0.
	if m, err := codecSpec.DecodePulse(codecHex(t, "203c")); err != nil || m.Type != pulsepb.PulseType_PULSE_REGISTER {
		t.Errorf("spec 203c: %v, %v", m, err)
	}
	// A Go message with a value the spec does not define is not sent.
	for _, c := range codecBoth {
		for _, m := range []proto.Message{
			&pulsepb.WorkerPulse{Type: 4},
			&pulsepb.PulseResponse{Error: 9},
			&pulsepb.ControlMsg{Type: -1},
			&pulsepb.WorkerResponse{Error: 5},
		} {
			b, err := c.AppendMessage([]byte("x"), m)
			if !isProtocolError(err) || string(b) != "x" {
				t.Errorf("%v %v: %q, %v; want a *ProtocolError and b unchanged", c.Numbering, m, b, err)
			}
			var w bytes.Buffer
			if err := c.WriteMessage(&w, m); !isProtocolError(err) || w.Len() != 0 {
				t.Errorf("%v %v: WriteMessage wrote %x, %v", c.Numbering, m, w.Bytes(), err)
			}
		}
	}
	var pe *ProtocolError
	_, err := codecLater.DecodePulse(nil)
	if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "pulse: protocol error: ") {
		t.Errorf("error %q", err)
	}
}

func TestCodecGarbage(t *testing.T) {
	for _, body := range []string{
		"ff",                       // field 31, wire type 7
		"08",                       // a varint cut short
		"08ffffffffffffffffffff01", // an 11-byte varint
		"0b",                       // a group never closed
		"0a05",                     // field 1 bytes, cut short
		"00",                       // field number 0
	} {
		for _, c := range codecBoth {
			for _, m := range []proto.Message{&pulsepb.WorkerPulse{}, &pulsepb.PulseResponse{}, &pulsepb.ControlMsg{}, &pulsepb.WorkerResponse{}} {
				b := codecHex(t, body)
				if got, err := codecDecode(c, m, b); !isProtocolError(err) {
					t.Errorf("%v %T %s: %v, %v; want a *ProtocolError", c.Numbering, m, body, got, err)
				}
				if got, err := codecRead(c, m, bytes.NewReader(codecFrame(b))); !isProtocolError(err) {
					t.Errorf("%v %T %s read: %v, %v; want a *ProtocolError", c.Numbering, m, body, got, err)
				}
			}
		}
	}
}

// TestCodecUnknownFields: unknown fields are kept and sent again, long
// messages (past the pooled buffer) read well, and a message read keeps
// nothing of the buffer it was read into.
func TestCodecUnknownFields(t *testing.T) {
	long := bytes.Repeat([]byte{'z'}, 300)
	body := append(codecHex(t, "0802101e1801"), 0x2a) // field 5, bytes
	body = protowire.AppendBytes(body, long)
	for _, c := range codecBoth {
		want := &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_FETCH, ExtraSize: 30, TaskId: proto.Uint64(1)}
		if c.Numbering == SpecNumbering {
			want.Type = pulsepb.ControlType_CTRL_SET_TASK
		}
		r := bytes.NewReader(append(codecFrame(body), codecFrame(body[:6])...))
		m, err := c.ReadControl(r)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := c.ReadControl(r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.ProtoReflect().GetUnknown(), body[6:]) {
			t.Errorf("%v: unknown fields %q", c.Numbering, m.ProtoReflect().GetUnknown())
		}
		if len(m2.ProtoReflect().GetUnknown()) != 0 {
			t.Errorf("%v: second message has unknown fields", c.Numbering)
		}
		m.ProtoReflect().SetUnknown(nil)
		if !proto.Equal(m, want) || !proto.Equal(m2, want) {
			t.Errorf("%v: %v and %v, want %v", c.Numbering, m, m2, want)
		}
		// A short message read after a long one into a pooled buffer.
		short, err := c.ReadPulse(bytes.NewReader(codecFrame(codecHex(t, "0801"))))
		if err != nil || short.Type != pulsepb.PulseType_PULSE_OK {
			t.Errorf("%v: %v, %v", c.Numbering, short, err)
		}
		enc, err := c.AppendMessage(nil, proto.Clone(m2))
		if err != nil {
			t.Fatal(err)
		}
		m3, err := c.DecodeControl(enc[8:])
		if err != nil || !proto.Equal(m3, m2) {
			t.Errorf("%v: re-encoded %x decodes as %v, %v", c.Numbering, enc, m3, err)
		}
	}
	// Sent again after the known fields.
	m, err := codecSpec.DecodeControl(body)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := codecSpec.AppendMessage(nil, m)
	if !bytes.Equal(enc[8:], body) {
		t.Errorf("re-encoded as %x, want %x", enc[8:], body)
	}
}

// codecReaders are the four readers as one type, for the limit tests.
var codecReaders = []struct {
	name string
	read func(Codec, io.Reader) error
}{
	{"ReadPulse", func(c Codec, r io.Reader) error { _, err := c.ReadPulse(r); return err }},
	{"ReadPulseResponse", func(c Codec, r io.Reader) error { _, err := c.ReadPulseResponse(r); return err }},
	{"ReadControl", func(c Codec, r io.Reader) error { _, err := c.ReadControl(r); return err }},
	{"ReadWorkerResponse", func(c Codec, r io.Reader) error { _, err := c.ReadWorkerResponse(r); return err }},
}

// TestCodecHugeLength: a length prefix of 2^63 or 2^64-1 is refused before
// anything is allocated for the message.
func TestCodecHugeLength(t *testing.T) {
	for _, n := range []uint64{1 << 63, math.MaxUint64, DefaultMaxMessage + 1} {
		in := binary.LittleEndian.AppendUint64(nil, n)
		for _, rd := range codecReaders {
			for _, c := range codecBoth {
				r := bytes.NewReader(in)
				if err := rd.read(c, r); !errors.Is(err, ErrTooLarge) {
					t.Fatalf("%s %v length %d: %v, want ErrTooLarge", rd.name, c.Numbering, n, err)
				}
				allocs := testing.AllocsPerRun(100, func() {
					r.Reset(in)
					_ = rd.read(c, r)
				})
				if allocs > 1 {
					t.Errorf("%s %v length %d: %v allocations", rd.name, c.Numbering, n, allocs)
				}
			}
		}
	}
	// The limit itself is accepted; a custom limit is kept.
	c := Codec{Limits: Limits{MaxMessage: 3}}
	if _, err := c.ReadPulse(bytes.NewReader(codecFrame(codecHex(t, "0801")))); err != nil {
		t.Errorf("2 bytes, limit 3: %v", err)
	}
	if _, err := c.ReadPulse(bytes.NewReader(codecFrame(codecHex(t, "08011002")))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("4 bytes, limit 3: %v", err)
	}
	if _, err := c.DecodePulse(codecHex(t, "08011002")); !errors.Is(err, ErrTooLarge) {
		t.Errorf("decode 4 bytes, limit 3: %v", err)
	}
	big := make([]byte, DefaultMaxMessage+1)
	if _, err := codecSpec.DecodeWorkerResponse(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("decode %d bytes: %v", len(big), err)
	}
	if _, err := codecSpec.ReadPulse(bytes.NewReader(binary.LittleEndian.AppendUint64(nil, 1<<63))); err == nil || !strings.Contains(err.Error(), "9223372036854775808") {
		t.Errorf("error %q does not give the length", err)
	}
}

func TestCodecExtraLimit(t *testing.T) {
	for _, tc := range []struct {
		c     Codec
		extra uint64
		ok    bool
	}{
		{codecSpec, DefaultMaxExtra, true},
		{codecSpec, DefaultMaxExtra + 1, false},
		{codecLater, math.MaxUint64, false},
		{Codec{Limits: Limits{MaxExtra: 10}}, 10, true},
		{Codec{Limits: Limits{MaxExtra: 10}}, 11, false},
		{Codec{Numbering: LaterNumbering, Limits: Limits{MaxExtra: 1 << 40}}, 1 << 40, true},
	} {
		for _, m := range []proto.Message{
			&pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_SET_TASK, ExtraSize: tc.extra, TaskId: proto.Uint64(2)},
			&pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_OK, TaskId: 2, ExtraSize: tc.extra},
		} {
			enc, err := tc.c.AppendMessage(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			for _, got := range [2]func() (proto.Message, error){
				func() (proto.Message, error) { return codecRead(tc.c, m, bytes.NewReader(enc)) },
				func() (proto.Message, error) { return codecDecode(tc.c, m, enc[8:]) },
			} {
				g, err := got()
				if tc.ok && err != nil {
					t.Errorf("%T extra %d, limits %+v: %v", m, tc.extra, tc.c.Limits, err)
				}
				if !tc.ok && !errors.Is(err, ErrTooLarge) {
					t.Errorf("%T extra %d, limits %+v: %v, want ErrTooLarge", m, tc.extra, tc.c.Limits, err)
				}
				// The message comes with the error, for an answer.
				if !proto.Equal(g, m) {
					t.Errorf("%T extra %d: got %v", m, tc.extra, g)
				}
			}
		}
	}
}

func TestCodecTruncated(t *testing.T) {
	full := codecFrame(codecHex(t, "0803101e1801"))
	for _, rd := range codecReaders {
		if err := rd.read(codecLater, bytes.NewReader(nil)); err != io.EOF {
			t.Errorf("%s of nothing: %v, want io.EOF", rd.name, err)
		}
		for n := 1; n < len(full); n++ {
			if err := rd.read(codecLater, bytes.NewReader(full[:n])); err != io.ErrUnexpectedEOF {
				t.Errorf("%s of %d bytes of %d: %v, want io.ErrUnexpectedEOF", rd.name, n, len(full), err)
			}
		}
	}
	// A message of length 0 is a message, all zeros: the spec's REGISTER.
	m, err := codecSpec.ReadPulse(bytes.NewReader(make([]byte, 8)))
	if err != nil || !proto.Equal(m, &pulsepb.WorkerPulse{}) {
		t.Errorf("empty message: %v, %v", m, err)
	}
}

func TestCodecReadExtra(t *testing.T) {
	var w bytes.Buffer
	r := strings.NewReader("0123456789")
	if err := codecSpec.ReadExtra(r, &w, 4); err != nil || w.String() != "0123" {
		t.Errorf("%q, %v", w.String(), err)
	}
	if err := codecSpec.ReadExtra(r, &w, 0); err != nil || w.String() != "0123" {
		t.Errorf("0 bytes: %q, %v", w.String(), err)
	}
	w.Reset()
	if err := codecSpec.ReadExtra(r, &w, 7); err != io.ErrUnexpectedEOF || w.String() != "456789" {
		t.Errorf("short: %q, %v", w.String(), err)
	}
	if err := codecSpec.ReadExtra(r, &w, 1); err != io.ErrUnexpectedEOF {
		t.Errorf("nothing left: %v", err)
	}
	if err := codecSpec.ReadExtra(r, &w, math.MaxUint64); !errors.Is(err, ErrTooLarge) {
		t.Errorf("2^64-1: %v", err)
	}
}

func TestCodecNumbering(t *testing.T) {
	if SpecNumbering.String() != "spec" || LaterNumbering.String() != "later" || Numbering(7).String() != "Numbering(7)" {
		t.Errorf("%v %v %v", SpecNumbering, LaterNumbering, Numbering(7))
	}
	if (Codec{}) != codecSpec {
		t.Error("the zero Codec is not the spec numbering")
	}
	bad := Codec{Numbering: 2}
	if _, err := bad.AppendMessage(nil, &pulsepb.WorkerPulse{}); err == nil {
		t.Error("AppendMessage in numbering 2")
	}
	if _, err := bad.ReadPulse(bytes.NewReader(make([]byte, 8))); err == nil {
		t.Error("ReadPulse in numbering 2")
	}
	if _, err := bad.DecodeControl(nil); err == nil {
		t.Error("DecodeControl in numbering 2")
	}
}

func TestCodecNotPulse(t *testing.T) {
	// Any other message is refused; a nil message of ours is empty.
	if _, err := codecSpec.AppendMessage(nil, nil); err == nil {
		t.Error("nil encodes")
	}
	enc, err := codecSpec.AppendMessage(nil, (*pulsepb.PulseResponse)(nil))
	if err != nil || !bytes.Equal(enc, make([]byte, 8)) {
		t.Errorf("nil *PulseResponse: %x, %v", enc, err)
	}
	enc, err = codecLater.AppendMessage(nil, (*pulsepb.ControlMsg)(nil))
	if err != nil || hex.EncodeToString(enc[8:]) != "0801" {
		t.Errorf("later nil *ControlMsg: %x, %v", enc, err)
	}
}

// TestCodecUnixSocket: a controller sends SET_TASK and its extra bytes
// over a Unix socket; the worker reads them with ReadControl and
// ReadExtra and answers with a WorkerResponse and extra bytes of its own.
func TestCodecUnixSocket(t *testing.T) {
	for _, c := range codecBoth {
		t.Run(c.Numbering.String(), func(t *testing.T) {
			ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			task := bytes.Repeat([]byte("task "), 10000)
			answer := []byte("0123456789abcdef")
			type result struct {
				msg   *pulsepb.ControlMsg
				extra []byte
				err   error
			}
			done := make(chan result, 1)
			go func() {
				var res result
				defer func() { done <- res }()
				conn, err := ln.Accept()
				if err != nil {
					res.err = err
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if res.msg, res.err = c.ReadControl(conn); res.err != nil {
					return
				}
				var extra bytes.Buffer
				if res.err = c.ReadExtra(conn, &extra, res.msg.ExtraSize); res.err != nil {
					return
				}
				res.extra = extra.Bytes()
				if res.err = c.WriteMessage(conn, &pulsepb.WorkerResponse{TaskId: res.msg.GetTaskId(), ExtraSize: uint64(len(answer))}); res.err != nil {
					return
				}
				_, res.err = conn.Write(answer)
			}()

			conn, err := net.Dial("unix", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			msg := &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_SET_TASK, ExtraSize: uint64(len(task)), TaskId: proto.Uint64(1)}
			if err := c.WriteMessage(conn, msg); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write(task); err != nil {
				t.Fatal(err)
			}
			resp, err := c.ReadWorkerResponse(conn)
			if err != nil {
				t.Fatal(err)
			}
			var extra bytes.Buffer
			if err := c.ReadExtra(conn, &extra, resp.ExtraSize); err != nil {
				t.Fatal(err)
			}
			if want := (&pulsepb.WorkerResponse{TaskId: 1, ExtraSize: 16}); !proto.Equal(resp, want) || !bytes.Equal(extra.Bytes(), answer) {
				t.Errorf("response %v %q, want %v %q", resp, extra.Bytes(), want, answer)
			}
			// One request, one response: the worker closes.
			if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("after the response: %d, %v", n, err)
			}
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			if !proto.Equal(res.msg, msg) || !bytes.Equal(res.extra, task) {
				t.Errorf("worker read %v and %d extra bytes", res.msg, len(res.extra))
			}
		})
	}
}

// codecFuzz checks one decoder on data: it never panics; it fails with a
// *ProtocolError or ErrTooLarge; a message it accepts encodes again and
// decodes to an equal message, with the same bytes the second time, which
// in the spec numbering are proto.Marshal's.
func codecFuzz[M proto.Message](t *testing.T, c Codec, data []byte, decode func([]byte) (M, error)) {
	m, err := decode(data)
	if err != nil {
		if !isProtocolError(err) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%v %T: error %v is neither a *ProtocolError nor ErrTooLarge", c.Numbering, m, err)
		}
		return
	}
	enc, err := c.AppendMessage(nil, m)
	if err != nil {
		t.Fatalf("%v: accepted %v does not encode: %v", c.Numbering, m, err)
	}
	if uint64(len(enc)-8) > uint64(len(data)) {
		t.Fatalf("%v: %x re-encodes longer: %x", c.Numbering, data, enc[8:])
	}
	m2, err := decode(enc[8:])
	if err != nil {
		t.Fatalf("%v: %v re-encoded as %x does not decode: %v", c.Numbering, m, enc[8:], err)
	}
	if !proto.Equal(m, m2) {
		t.Fatalf("%v: %v re-encoded as %x decodes as %v", c.Numbering, m, enc[8:], m2)
	}
	enc2, err := c.AppendMessage(nil, m2)
	if err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("%v: %v encodes as %x then %x, %v", c.Numbering, m, enc, enc2, err)
	}
	if c.Numbering == SpecNumbering {
		pb, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil || !bytes.Equal(pb, enc[8:]) {
			t.Fatalf("spec: %v encodes as %x, proto.Marshal %x, %v", m, enc[8:], pb, err)
		}
	}
}

// FuzzDecodePulse fuzzes the controller socket's two messages, WorkerPulse
// and PulseResponse; numbering%2 picks the numbering.
func FuzzDecodePulse(f *testing.F) {
	f.Fuzz(func(t *testing.T, numbering uint8, data []byte) {
		c := Codec{Numbering: Numbering(numbering % 2)}
		codecFuzz(t, c, data, c.DecodePulse)
		codecFuzz(t, c, data, c.DecodePulseResponse)
	})
}

// FuzzDecodeControl fuzzes a worker socket's two messages, ControlMsg and
// WorkerResponse; numbering%2 picks the numbering.
func FuzzDecodeControl(f *testing.F) {
	f.Fuzz(func(t *testing.T, numbering uint8, data []byte) {
		c := Codec{Numbering: Numbering(numbering % 2)}
		codecFuzz(t, c, data, c.DecodeControl)
		codecFuzz(t, c, data, c.DecodeWorkerResponse)
	})
}
