package proctest

import (
	"net"
	"os"
	"testing"
)

func TestTCPListening(t *testing.T) {
	if TCPListening(os.Getpid()) {
		t.Fatal("listening before any listener")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !TCPListening(os.Getpid()) {
		t.Error("not listening with a listener open")
	}
	l.Close()
	if TCPListening(os.Getpid()) {
		t.Error("listening after the listener closed")
	}
}
