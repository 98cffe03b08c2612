package attach

import (
	"context"
	"syscall"
	"time"

	"github.com/pibgw/pibgw/rdmacm"
)

// An attached process's SA multicast joins (rdma_join_multicast through the daemon). The
// port joins once for everyone (the daemon's IPoIB interfaces, its own rdma_cm, every
// process: sa.Client.JoinFor keeps each holder's share, rdmacm.IPoIBHost counts the
// rdma_cm IDs), so a process may only give back what it took: it leaves a group as often
// as it joined it and no more, and when it goes without leaving (exit, kill -9) the
// daemon leaves for it as many times as it had joined — as the kernel's ucma_close_id
// does for a dead process's IDs. The other holders keep the port in the group.

// mcJoins counts a process's joins per group (session.mu).
type mcJoins struct {
	n    map[joinKey]int
	done bool // released: a join answered after this is given back at once
}

// joinLeave serves opJoin and opLeave.
func (x *session) joinLeave(ctx context.Context, h rdmacm.Host, m *msg) *msg {
	d, err := x.hostDevice(m)
	if err != nil {
		return errMsg(m.Op, err)
	}
	mgid, err := parseGID(m.GID)
	if err != nil {
		return fail(m.Op, syscall.EINVAL, "%v", err)
	}
	k := joinKey{m.Dev, m.Port, mgid}
	if m.Op == opLeave {
		x.mu.Lock()
		n := x.mcJoins.n[k]
		switch {
		case n == 0:
			x.mu.Unlock()
			// librdmacm's rdma_leave_multicast of an address the ID has not joined.
			return fail(m.Op, syscall.EADDRNOTAVAIL, "group %s is not joined by this process", m.GID)
		case n == 1:
			delete(x.mcJoins.n, k)
			delete(x.joins, k)
		default:
			x.mcJoins.n[k] = n - 1
		}
		x.mu.Unlock()
		if err := h.LeaveMulticast(ctx, d, mgid); err != nil {
			return errMsg(m.Op, err)
		}
		return &msg{OK: true}
	}
	g, err := h.JoinMulticast(ctx, d, mgid, m.QKey)
	if err != nil {
		return errMsg(m.Op, err)
	}
	k.gid = g.MGID // the SA's, when the process asked it to assign one
	x.mu.Lock()
	if x.mcJoins.done {
		x.mu.Unlock()
		leaveFor(h, d, k, 1)
		return fail(m.Op, syscall.ENODEV, "the process detached")
	}
	if x.mcJoins.n == nil {
		x.mcJoins.n = make(map[joinKey]int)
	}
	x.mcJoins.n[k]++
	x.joins[k] = d
	x.mu.Unlock()
	return &msg{OK: true, Group: &g}
}

// releaseJoins (at the session's end) leaves every group the process joined and did not
// leave, once for each join.
func (x *session) releaseJoins(joins map[joinKey]rdmacm.Device) {
	x.mu.Lock()
	n := x.mcJoins.n
	x.mcJoins = mcJoins{done: true}
	x.mu.Unlock()
	h := x.srv.Host
	if h == nil {
		return
	}
	for k, d := range joins {
		leaveFor(h, d, k, max(n[k], 1))
	}
}

func leaveFor(h rdmacm.Host, d rdmacm.Device, k joinKey, times int) {
	for range times {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h.LeaveMulticast(ctx, d, k.gid)
		cancel()
	}
}
