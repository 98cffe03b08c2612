package attach

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/pibgw/pibgw/rdmacm/ibcm"
)

// Service IDs (issue 43 item 5). The kernel has one CM per port for every listener,
// the kernel's own (IPoIB connected mode) and every process's; a service ID has one
// listener there. Here the daemon's CM and each process's CM are apart, so the daemon
// keeps the rule: a process's listen is registered in the daemon's CM of the port too
// (a claim that never answers anything: the daemon hands the process the REQs first,
// cmRouter), so a service ID the daemon listens on is refused to processes, and the
// daemon cannot listen later on one a process has. The IPoIB-CM service IDs of every
// QP number are the daemon's whether or not an interface has that QPN yet: a process
// must not take the ID of a P_Key child not yet made.

// IPoIB-CM service IDs: base | UD QPN (ipoib/cm.go; Linux IPOIB_CM_IETF_ID and the
// other reading of RFC 4755 §6.3).
const (
	ipoibCMServiceID    = 0x1000000000000000
	ipoibCMServiceIDAlt = 0x0100000000000000
)

func ipoibServiceID(sid uint64) bool {
	base := sid &^ 0xFFFFFF
	return base == ipoibCMServiceID || base == ipoibCMServiceIDAlt
}

// sidBusy is the errno for a service ID that has a listener: EADDRINUSE for an rdma_cm
// port (IBA A11.2's IP CM range 0x0000000001xxxxxx: rdma_bind_addr and rdma_listen's
// errno for a port in use, cma_alloc_port), else EBUSY, what ib_cm_listen returns for
// a service ID already listened on (cm.c: cm_insert_listen finds one, -EBUSY).
func sidBusy(sid uint64) syscall.Errno {
	if sid>>24 == 1 {
		return syscall.EADDRINUSE
	}
	return syscall.EBUSY
}

// claimSID registers a process's listen on sid in the daemon's CM of the port, if the
// daemon runs one there; it fails with sidBusy if the daemon listens on sid.
func (s *Server) claimSID(dev int, port uint8, sid uint64) (*ibcm.ID, error) {
	if ipoibServiceID(sid) {
		return nil, &Error{Op: opListen, Errno: sidBusy(sid), Msg: fmt.Sprintf("service ID %#x is the daemon's (IPoIB connected mode)", sid)}
	}
	cm := s.daemonCM(dev, port)
	if cm == nil {
		return nil, nil
	}
	id := cm.NewID(refuseClaimed, nil)
	if err := id.Listen(sid, 0); err != nil {
		if errors.Is(err, ibcm.ErrBusy) {
			return nil, &Error{Op: opListen, Errno: sidBusy(sid), Msg: fmt.Sprintf("service ID %#x is listened on by the daemon", sid)}
		}
		return nil, &Error{Op: opListen, Errno: syscall.ENODEV, Msg: err.Error()}
	}
	return id, nil
}

// refuseClaimed answers a request that reached a claim instead of its process (the
// process stopped listening meanwhile): rejected, as by a CM with no listener.
func refuseClaimed(id *ibcm.ID, ev *ibcm.Event) {
	if ev.Type == ibcm.EventReqReceived || ev.Type == ibcm.EventSIDRReqReceived {
		id.Destroy()
	}
}

// daemonCM returns the daemon's CM of a port, nil if it runs none there.
func (s *Server) daemonCM(dev int, port uint8) *ibcm.CM {
	if s.Host == nil || dev < 0 || dev >= len(s.Devices) {
		return nil
	}
	for _, d := range s.Host.Devices() {
		if d.CM != nil && d.Port.Device() == s.Devices[dev] && d.Port.Num() == port {
			return d.CM
		}
	}
	return nil
}

// listen answers cm_listen and cm_unlisten.
func (x *session) listen(m *msg) *msg {
	s := x.srv
	k := listenKey{m.Dev, m.Port, m.SID}
	s.mu.Lock()
	if m.Op == opUnlisten {
		var claim *ibcm.ID
		if s.listens[k] == x {
			delete(s.listens, k)
			claim = s.claims[k]
			delete(s.claims, k)
			x.listens--
		}
		s.mu.Unlock()
		if claim != nil {
			claim.Destroy()
		}
		return &msg{OK: true}
	}
	defer s.mu.Unlock()
	switch o := s.listens[k]; {
	case o == x:
		return &msg{OK: true}
	case o != nil:
		return fail(m.Op, sidBusy(m.SID), "service ID %#x is listened on by process %d", m.SID, o.pid)
	case x.listens >= maxListens:
		return fail(m.Op, syscall.ENOMEM, "the process listens on %d service IDs, its limit", x.listens)
	}
	claim, err := s.claimSID(m.Dev, m.Port, m.SID)
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			return fail(m.Op, ae.Errno, "%s", ae.Msg)
		}
		return errMsg(m.Op, err)
	}
	if claim != nil {
		s.claims[k] = claim
	}
	x.listens++
	s.listens[k] = x
	return &msg{OK: true}
}

// dropListensLocked removes a gone process's listens and returns their claims, to be
// destroyed without s.mu; s.mu held.
func (s *Server) dropListensLocked(x *session) []*ibcm.ID {
	var claims []*ibcm.ID
	for k, o := range s.listens {
		if o == x {
			delete(s.listens, k)
			if c := s.claims[k]; c != nil {
				claims = append(claims, c)
				delete(s.claims, k)
			}
		}
	}
	return claims
}
