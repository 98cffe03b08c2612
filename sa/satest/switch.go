package satest

import (
	"time"

	"github.com/pibgw/pibgw/fabric"
)

func clockStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// newSwitch builds a switch with its identity and management agent.
func newSwitch(cfg fabric.SwitchConfig, guid uint64, desc string) *fabric.Switch {
	_, _ = guid, desc // TODO: the switch SMA's identity
	return fabric.NewSwitch(cfg)
}
