package pulse

import (
	"bytes"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/laboro-go/laboro/protocols/pulse/pulsepb"
)

// codecBenchMessages are typical messages of each type: a worker's OK
// pulse, a registration's answer, a SET_TASK and a FETCH's answer.
var codecBenchMessages = []struct {
	name string
	msg  proto.Message
}{
	{"WorkerPulse", &pulsepb.WorkerPulse{Type: pulsepb.PulseType_PULSE_OK, WorkerId: 12, TaskId: 345, NextPulse: 60}},
	{"PulseResponse", &pulsepb.PulseResponse{Error: pulsepb.ControllerError_CTRL_ERR_OK, WorkerId: proto.Uint64(12)}},
	{"ControlMsg", &pulsepb.ControlMsg{Type: pulsepb.ControlType_CTRL_SET_TASK, ExtraSize: 4096, TaskId: proto.Uint64(345)}},
	{"WorkerResponse", &pulsepb.WorkerResponse{Error: pulsepb.WorkerError_WORKER_ERR_OK, TaskId: 345, ExtraSize: 16}},
}

// BenchmarkCodecEncode is AppendMessage into a reused buffer.
func BenchmarkCodecEncode(b *testing.B) {
	for _, c := range codecBoth {
		for _, bm := range codecBenchMessages {
			b.Run(bm.name+"/"+c.Numbering.String(), func(b *testing.B) {
				b.ReportAllocs()
				buf := make([]byte, 0, 64)
				for b.Loop() {
					var err error
					if buf, err = c.AppendMessage(buf[:0], bm.msg); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCodecWrite is WriteMessage to io.Discard.
func BenchmarkCodecWrite(b *testing.B) {
	for _, c := range codecBoth {
		for _, bm := range codecBenchMessages {
			b.Run(bm.name+"/"+c.Numbering.String(), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := c.WriteMessage(io.Discard, bm.msg); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCodecDecode is Decode* of the message's bytes.
func BenchmarkCodecDecode(b *testing.B) {
	for _, c := range codecBoth {
		for _, bm := range codecBenchMessages {
			b.Run(bm.name+"/"+c.Numbering.String(), func(b *testing.B) {
				enc, err := c.AppendMessage(nil, bm.msg)
				if err != nil {
					b.Fatal(err)
				}
				body := enc[8:]
				b.ReportAllocs()
				for b.Loop() {
					if _, err := codecDecode(c, bm.msg, body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCodecRead is Read* of the length-prefixed message from a
// bytes.Reader.
func BenchmarkCodecRead(b *testing.B) {
	for _, c := range codecBoth {
		for _, bm := range codecBenchMessages {
			b.Run(bm.name+"/"+c.Numbering.String(), func(b *testing.B) {
				enc, err := c.AppendMessage(nil, bm.msg)
				if err != nil {
					b.Fatal(err)
				}
				r := bytes.NewReader(enc)
				b.ReportAllocs()
				for b.Loop() {
					r.Reset(enc)
					if _, err := codecRead(c, bm.msg, r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
