package main

import (
	"bytes"
	"testing"

	"github.com/pibgw/pibgw/fabric"
	"github.com/pibgw/pibgw/fabric/fabrictest"
)

// pibgw capture counts the records it wrote and, from their ERF loss counters, the
// packets the daemon dropped because the capture was not read in time.
func TestCaptureCountsDropped(t *testing.T) {
	p := fabrictest.UD{DLID: 2, SLID: 1, DestQP: 0x48, SrcQP: 0x49, QKey: 1, Payload: []byte("x")}.Build()
	rec := 16 + fabric.ERFHeaderLen + len(p) + 2
	var stream bytes.Buffer
	cw := fabric.NewCaptureWriter(&stream, fabric.CaptureOptions{Backlog: 24 + 2*rec})
	cw.WritePackets([][]byte{p, p, p, p, p}) // two fit, three dropped
	cw.Flush()
	cw.WritePackets([][]byte{p}) // says so
	cw.Close()
	var out bytes.Buffer
	c := &countingWriter{w: &out}
	// The stream arrives in whole records, as control.Client.Capture passes it on.
	b := stream.Bytes()
	c.Write(b[:24+2*rec])
	c.Write(b[24+2*rec:])
	if c.records != 3 || c.dropped != 3 || !bytes.Equal(out.Bytes(), b) {
		t.Fatalf("records %d, dropped %d, want 3 and 3", c.records, c.dropped)
	}
}
