package satest

import (
	"time"

	"github.com/pibgw/pibgw/fabric"
)

func clockStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// newSwitch builds a managed switch (ports wait in Init for the SM) with its identity;
// NewSwitch installs its SMA.
func newSwitch(cfg fabric.SwitchConfig, guid uint64, desc string) *fabric.Switch {
	cfg.NodeGUID, cfg.NodeDesc, cfg.Managed = guid, desc, true
	return fabric.NewSwitch(cfg)
}
