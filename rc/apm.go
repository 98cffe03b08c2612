package rc

import "github.com/pibgw/pibgw/hca"

// Automatic path migration (IBA 17.2.8) for RC and UC: hca keeps the alternate path and
// the migration state (hca/apm.go); the connection keeps the alternate path's packet
// headers ready (conn.alt), migrates when its requester runs out of retries on the
// primary path (ackTimeout) and when the peer's packets come on the alternate path with
// MigReq set (peerMigrated).

// migrate moves an ARMED QP to its alternate path and switches the connection's packets
// to it; false if the QP is not ARMED.
func (c *conn) migrate() bool {
	if !c.qp.Migrate() {
		return false
	}
	a := c.qp.Attr()
	c.setPath(&a)
	c.stats.Migrations.Add(1)
	return true
}

// peerMigrated handles a packet that did not come on the primary path: if the QP is ARMED
// and the packet came on the alternate path with MigReq set, the peer has migrated and
// so does this QP (IBA 17.2.8). It reports whether the packet is to be taken.
func (c *conn) peerMigrated(pk *hca.Packet) bool {
	alt := c.alt.Load()
	if alt == nil || !pk.BTH.MigReq() || pk.LRH.SLID() != alt.dlid || pk.Port != nil && pk.Port != alt.port {
		return false
	}
	if c.qp.PathMigState() != hca.MigArmed {
		return false
	}
	if !c.migrate() {
		// Another packet migrated the QP meanwhile: take this one if it now matches.
		p := c.path.Load()
		return p != nil && p.dlid == pk.LRH.SLID()
	}
	return true
}
