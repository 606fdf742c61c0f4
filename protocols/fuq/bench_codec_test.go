package fuq

import (
	"bytes"
	"testing"
)

// BenchmarkEncode encodes each golden message into a reused buffer.
func BenchmarkEncode(b *testing.B) {
	for _, v := range vectors {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 256)
			var err error
			for b.Loop() {
				if buf, err = v.msg.AppendBinary(buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}

// BenchmarkDecode reads each golden message from a bytes.Reader.
func BenchmarkDecode(b *testing.B) {
	for _, v := range vectors {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			wire := v.bytes(b)
			r := bytes.NewReader(wire)
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				r.Reset(wire)
				if _, err := ReadMessage(r, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
