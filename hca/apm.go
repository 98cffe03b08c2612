package hca

import "sync/atomic"

// Automatic path migration (IBA 17.2.8): an RC or UC QP may hold an alternate path
// (ModifyQP with QPAttrAltPath: alt_ah_attr, alt_port_num, alt_pkey_index, alt_timeout)
// beside its primary one, and a migration state (QPAttr.PathMigState):
//
//   - MIGRATED: no usable alternate path; packets go out with BTH:MigReq = 1 (IBA 9.2).
//   - REARM: an alternate path is loaded, waiting for the peer; MigReq = 0. The first valid
//     packet from the peer on the primary path with MigReq = 0 moves the QP to ARMED.
//   - ARMED: migration is possible. The QP migrates when its requester exhausts its retries
//     on the primary path (the transport calls Migrate), when a packet arrives on the
//     alternate path with MigReq = 1 (the peer has migrated), or when the consumer sets
//     MIGRATED (manual migration). Migrating makes the alternate path primary, sets
//     MIGRATED and raises IBV_EVENT_PATH_MIG.
//
// Consumers set REARM or ARMED (as mlx5 accepts) once an alternate path is loaded, and
// MIGRATED only from ARMED.

// Path migration states (ibv_mig_state).
const (
	MigMigrated uint8 = 0
	MigRearm    uint8 = 1
	MigArmed    uint8 = 2
)

// apmState is the part of a QP the packet path reads without the QP lock.
type apmState struct {
	mig       atomic.Uint32 // the migration state, as QPAttr.PathMigState
	altPort   atomic.Pointer[Port]
	altLoaded bool // under QP.mu: an alternate path is loaded and not yet migrated to
}

// PathMigState returns the QP's migration state (MigMigrated, MigRearm or MigArmed).
func (qp *QP) PathMigState() uint8 { return uint8(qp.apm.mig.Load()) }

// AltPort returns the port of the loaded alternate path, or nil.
func (qp *QP) AltPort() *Port { return qp.apm.altPort.Load() }

// checkAPM validates the alternate path and migration state of a modify (qp.mu held).
func (qp *QP) checkAPM(a *QPAttr, mask QPAttrMask) error {
	const op = "modify_qp"
	if mask&QPAttrAltPath != 0 {
		if qp.dev.Port(int(a.AltPortNum)) == nil {
			return errorf(op, EINVAL, "alt_port_num %d does not exist", a.AltPortNum)
		}
		if a.AltAHAttr.DLID == 0 || a.AltAHAttr.SL > 15 {
			return errorf(op, EINVAL, "alt_ah_attr: dlid %#x sl %d", a.AltAHAttr.DLID, a.AltAHAttr.SL)
		}
		if int(a.AltPKeyIndex) >= PKeyTableLen {
			return errorf(op, EINVAL, "alt_pkey_index %d out of range 0..%d", a.AltPKeyIndex, PKeyTableLen-1)
		}
		if a.AltTimeout > 31 {
			return errorf(op, EINVAL, "alt_timeout %d above 31", a.AltTimeout)
		}
	}
	if mask&QPAttrPathMigState == 0 {
		return nil
	}
	cur := qp.attr.PathMigState
	loaded := qp.apm.altLoaded || mask&QPAttrAltPath != 0
	switch a.PathMigState {
	case MigRearm, MigArmed:
		if !loaded {
			return errorf(op, EINVAL, "path_mig_state %d needs an alternate path (IBV_QP_ALT_PATH)", a.PathMigState)
		}
		if a.PathMigState == MigRearm && cur == MigArmed {
			return errorf(op, EINVAL, "path_mig_state REARM while ARMED")
		}
	case MigMigrated:
		if cur == MigRearm {
			return errorf(op, EINVAL, "path_mig_state MIGRATED while REARM (only an ARMED QP migrates)")
		}
	default:
		return errorf(op, EINVAL, "path_mig_state %d unknown", a.PathMigState)
	}
	return nil
}

// applyAPM stores the alternate path and migration state (qp.mu held). It reports
// whether the modify migrated the QP (MIGRATED set while ARMED): the caller raises the
// event once the lock is released.
func (qp *QP) applyAPM(a *QPAttr, mask QPAttrMask) bool {
	t := &qp.attr
	if mask&QPAttrAltPath != 0 {
		t.AltAHAttr, t.AltPKeyIndex, t.AltPortNum, t.AltTimeout = a.AltAHAttr, a.AltPKeyIndex, a.AltPortNum, a.AltTimeout
		qp.apm.altLoaded = true
		qp.apm.altPort.Store(qp.dev.Port(int(a.AltPortNum)))
	}
	if mask&QPAttrPathMigState == 0 {
		return false
	}
	if a.PathMigState == MigMigrated {
		return t.PathMigState == MigArmed && qp.migrateLocked()
	}
	t.PathMigState = a.PathMigState
	qp.apm.mig.Store(uint32(a.PathMigState))
	return false
}

// resetAPMLocked forgets the alternate path (ModifyQP to RESET; qp.mu held).
func (qp *QP) resetAPMLocked() {
	qp.attr.PathMigState = MigMigrated
	qp.apm.mig.Store(uint32(MigMigrated))
	qp.apm.altLoaded = false
	qp.apm.altPort.Store(nil)
}

// migrateLocked makes the alternate path primary (qp.mu held).
func (qp *QP) migrateLocked() bool {
	if qp.attr.PathMigState != MigArmed || !qp.apm.altLoaded {
		return false
	}
	t := &qp.attr
	t.AHAttr, t.PortNum, t.PKeyIndex, t.Timeout = t.AltAHAttr, t.AltPortNum, t.AltPKeyIndex, t.AltTimeout
	t.PathMigState = MigMigrated
	qp.port.Store(qp.dev.Port(int(t.PortNum)))
	qp.pkeyIndex.Store(uint32(t.PKeyIndex))
	qp.apm.altLoaded = false
	qp.apm.altPort.Store(nil)
	qp.apm.mig.Store(uint32(MigMigrated))
	return true
}

// Migrate moves an ARMED QP to its alternate path (IBA 17.2.8) and raises
// IBV_EVENT_PATH_MIG; the transport calls it when the primary path fails or the peer has
// migrated, then reads the new path with Attr. It reports false (nothing changed) for a
// QP that is not ARMED.
func (qp *QP) Migrate() bool {
	qp.mu.Lock()
	ok := qp.migrateLocked()
	qp.mu.Unlock()
	if ok {
		qp.dev.raise(AsyncEvent{Type: EventPathMig, QP: qp})
	}
	return ok
}

// Rearmed moves a QP in REARM to ARMED: the transport calls it when the peer's packet on
// the primary path says (MigReq = 0) that the peer has loaded its alternate path too.
func (qp *QP) Rearmed() {
	qp.mu.Lock()
	if qp.attr.PathMigState == MigRearm && qp.apm.altLoaded {
		qp.attr.PathMigState = MigArmed
		qp.apm.mig.Store(uint32(MigArmed))
	}
	qp.mu.Unlock()
}
