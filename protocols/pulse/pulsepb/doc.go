// Package pulsepb holds the protobuf messages of the controller–worker
// protocol (package pulse), generated from pulse.proto: WorkerPulse and
// PulseResponse on the controller's socket, ControlMsg and WorkerResponse on
// a worker's. The enums carry the spec's numbers (PULSE_REGISTER = 0, …);
// pulse.Codec translates them to the reference's later numbering on the wire
// when asked to.
//
// The generated pulse.pb.go is committed; regenerating it needs protoc and
// protoc-gen-go at the version of google.golang.org/protobuf in go.mod.
package pulsepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative pulse.proto
