//go:build pibgw_omit_netstack

package tun

import (
	"context"
	"log/slog"
	"net"
)

// Netstack is not built in: see ErrNetstackOmitted.
type Netstack struct{}

var _ Device = (*Netstack)(nil)

// SetNetstackLogger does nothing: there is no gVisor to log.
func SetNetstackLogger(*slog.Logger) {}

// NewNetstack returns ErrNetstackOmitted: this binary was built without gVisor.
func NewNetstack(cfg NetstackConfig) (*Netstack, error) { return nil, ErrNetstackOmitted }

func (*Netstack) Read([][]byte, []int, int) (int, error) { return 0, ErrClosed }
func (*Netstack) Write([][]byte, int) (int, error)       { return 0, ErrClosed }
func (*Netstack) MTU() int                               { return 0 }
func (*Netstack) SetMTU(int) error                       { return ErrNetstackOmitted }
func (*Netstack) Name() string                           { return "" }
func (*Netstack) BatchSize() int                         { return 1 }
func (*Netstack) Dropped() uint64                        { return 0 }
func (*Netstack) Close() error                           { return nil }

func (*Netstack) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, ErrNetstackOmitted
}

func (*Netstack) Listen(string, string) (net.Listener, error) { return nil, ErrNetstackOmitted }

func (*Netstack) ListenPacket(string, string) (net.PacketConn, error) {
	return nil, ErrNetstackOmitted
}
