//go:build !pibgw_omit_netstack

package tun

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	gvlog "gvisor.dev/gvisor/pkg/log"
)

// SetNetstackLogger sends gVisor's log lines (its netstack warns through a package-wide
// glog-style logger on stderr) to l, one slog record per line at the matching level, so
// a daemon's log stays one format. wireguard-go's TUN code logs nothing of its own.
func SetNetstackLogger(l *slog.Logger) {
	gvlog.SetTarget(slogEmitter{l.With("component", "netstack")})
}

type slogEmitter struct{ l *slog.Logger }

func (e slogEmitter) Emit(_ int, level gvlog.Level, _ time.Time, format string, v ...any) {
	lv := slog.LevelDebug
	switch level {
	case gvlog.Warning:
		lv = slog.LevelWarn
	case gvlog.Info:
		lv = slog.LevelInfo
	}
	e.l.Log(context.Background(), lv, fmt.Sprintf(format, v...))
}
