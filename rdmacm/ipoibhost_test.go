package rdmacm_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/pibgw/pibgw/clock"
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/ipoib"
	"github.com/pibgw/pibgw/rc"
	"github.com/pibgw/pibgw/rdmacm"
	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/tun/tuntest"
	"github.com/pibgw/pibgw/wire"
)

// ipoibHosts builds a fabric with the built-in SM and SA and one IPoIB interface per
// HCA (10.10.0.i+1/24 on a channel TUN), each on its own host, as separate machines.
func ipoibHosts(t *testing.T, n int) []*rdmacm.IPoIBHost {
	t.Helper()
	clk := clock.Real{}
	f := satest.OneSwitch(t, n, satest.Options{Clock: clk})
	for _, d := range f.HCAs {
		rc.Register(d)
	}
	sm := f.StartSM(t, sa.Config{})
	agent, err := sa.StartSA(sm, sa.AgentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	var hosts []*rdmacm.IPoIBHost
	for i, p := range f.Ports() {
		client, err := sa.NewClient(p, sa.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		ifc, err := ipoib.New(ipoib.Config{Port: p, PKey: 0xFFFF, SA: client,
			Device: tuntest.NewChannel("ib"+string(rune('0'+i)), 2044),
			Addrs:  []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 10, 0, byte(i + 1)}), 24)},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go ifc.Run(ctx)
		t.Cleanup(func() { cancel(); ifc.Close() })
		deadline := time.Now().Add(10 * time.Second)
		for !ifc.State().Up && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !ifc.State().Up {
			t.Fatalf("%s down: %s", ifc.Name(), ifc.State().Reason)
		}
		h := rdmacm.NewIPoIBHost(clk)
		h.Add(ifc, client)
		t.Cleanup(h.Close)
		hosts = append(hosts, h)
	}
	return hosts
}

// TestStreamOverIPoIB: addresses resolved through IPoIB ARP, the route from the SA, a
// stream between two hosts, and one from a host to itself.
func TestStreamOverIPoIB(t *testing.T) {
	hosts := ipoibHosts(t, 2)
	l, err := rdmacm.Listen(hosts[1], "10.10.0.2:7471")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, from := range []*rdmacm.IPoIBHost{hosts[0], hosts[1]} { // across, then loopback
		c, err := rdmacm.Dial(ctx, from, "10.10.0.2:7471")
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte("over ipoib "), 10000)
		go func() { c.Write(msg); c.Close() }()
		got, err := io.ReadAll(s)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("read %d bytes, %v", len(got), err)
		}
		if r, ok := c.ID().Route(); !ok || r.DLID == 0 {
			t.Fatalf("route %+v", r)
		}
		s.Close()
	}
	// Nobody has 10.10.0.77: the ARP goes unanswered. As Linux's rdma_resolve_addr, the
	// resolution solicits again past the three probes that make the neighbour FAILED
	// (3 s) and ends in ETIMEDOUT at the caller's timeout, not EHOSTUNREACH at 3 s.
	ch := rdmacm.CreateEventChannel()
	id, _ := rdmacm.CreateID(hosts[0], ch, nil, rdmacm.PSTCP)
	start := time.Now()
	if err := id.ResolveAddr(netip.MustParseAddr("10.10.0.1"), netip.MustParseAddrPort("10.10.0.77:7471"), 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if e := getEvent(t, ch, rdmacm.EventAddrError); e.Status != -int(syscall.ETIMEDOUT) || time.Since(start) < 3900*time.Millisecond {
		t.Fatalf("resolving an address nobody has: status %d after %v; want ETIMEDOUT after 4 s", e.Status, time.Since(start))
	}
}

// TestMulticastJoin: rdma_join_multicast on two hosts (the SA creates the group with
// the UDP Q_Key, MGID with the RDMA CM signature), a datagram to the group reaches the
// other member's QP. The first member resolves the group's address first, as mckey does
// (rdma_resolve_addr to a multicast address: resolved at once, no ARP), the second binds.
func TestMulticastJoin(t *testing.T) {
	hosts := ipoibHosts(t, 2)
	group := netip.MustParseAddr("224.1.2.3")
	type member struct {
		id *rdmacm.ID
		ch *rdmacm.EventChannel
		e  *endpoint
		ud rdmacm.UDParam
	}
	var ms []member
	for i, h := range hosts {
		ch := rdmacm.CreateEventChannel()
		id, err := rdmacm.CreateID(h, ch, nil, rdmacm.PSUDP)
		if err != nil {
			t.Fatal(err)
		}
		src := netip.AddrFrom4([4]byte{10, 10, 0, byte(i + 1)})
		if i == 0 {
			if err := id.ResolveAddr(src, netip.AddrPortFrom(group, 0), 2*time.Second); err != nil {
				t.Fatal(err)
			}
			getEvent(t, ch, rdmacm.EventAddrResolved).Ack()
		} else if err := id.BindAddr(netip.AddrPortFrom(src, 0)); err != nil {
			t.Fatal(err)
		}
		e := newEndpoint(t, id.Device())
		if _, err := id.CreateQP(e.pd, e.initAttr()); err != nil {
			t.Fatal(err)
		}
		if err := id.JoinMulticast(group); err != nil {
			t.Fatal(err)
		}
		ev := getEvent(t, ch, rdmacm.EventMulticastJoin)
		ev.Ack()
		if ev.UD.QPNum != rdmacm.MulticastQPN || ev.UD.QKey != rdmacm.UDPQKey || ev.UD.AHAttr.DLID < 0xC000 ||
			ev.UD.AHAttr.GRH.DGID[3] != 0x01 {
			t.Fatalf("MULTICAST_JOIN %+v", ev.UD)
		}
		ms = append(ms, member{id, ch, e, ev.UD})
	}
	b := ms[1]
	if _, err := b.id.QP().PostRecv([]hca.RecvWR{{WRID: 1, SGL: b.e.sge(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	a := ms[0]
	ah, err := a.e.pd.CreateAH(a.ud.AHAttr)
	if err != nil {
		t.Fatal(err)
	}
	copy(a.e.buf, "to the group")
	// The SA answers a join before the SM has programmed the switch's MFT (as OpenSM
	// does), so the first packets may find no route yet: send until one arrives.
	var wcs [1]hca.WC
	got := false
	for try := 0; try < 50 && !got; try++ {
		if _, err := a.id.QP().PostSend([]hca.SendWR{{Opcode: hca.WRSend, SGL: a.e.sge(0, 12),
			AH: ah, RemoteQPN: a.ud.QPNum, RemoteQKey: a.ud.QKey}}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
			if b.e.cq.Poll(wcs[:]) == 1 {
				got = true
				break
			}
		}
	}
	if !got || wcs[0].Status != hca.WCSuccess || string(b.e.buf[40:52]) != "to the group" {
		t.Fatalf("member received %v (%v) %q", got, wcs[0].Status, b.e.buf[40:52])
	}
	for _, m := range ms {
		if err := m.id.LeaveMulticast(group); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMulticastLeaveSharedPort: two IDs of one port join a group (two processes on one
// HCA, as rdma-core's test_rdmacm multicast tests run them); the first one's leave keeps
// the port a member for the second, which still receives what a member on another host
// sends, and the last leave succeeds too (it was EIO: the port had left at the SA already).
// A leave the SA refuses is no error of rdma_leave_multicast either.
func TestMulticastLeaveSharedPort(t *testing.T) {
	hosts := ipoibHosts(t, 2)
	group := netip.MustParseAddr("224.1.2.4")
	type member struct {
		id *rdmacm.ID
		e  *endpoint
		ud rdmacm.UDParam
	}
	join := func(h *rdmacm.IPoIBHost, src netip.Addr) member {
		ch := rdmacm.CreateEventChannel()
		id, err := rdmacm.CreateID(h, ch, nil, rdmacm.PSUDP)
		if err != nil {
			t.Fatal(err)
		}
		if err := id.BindAddr(netip.AddrPortFrom(src, 0)); err != nil {
			t.Fatal(err)
		}
		e := newEndpoint(t, id.Device())
		if _, err := id.CreateQP(e.pd, e.initAttr()); err != nil {
			t.Fatal(err)
		}
		if err := id.JoinMulticast(group); err != nil {
			t.Fatal(err)
		}
		ev := getEvent(t, ch, rdmacm.EventMulticastJoin)
		ev.Ack()
		return member{id, e, ev.UD}
	}
	a0 := join(hosts[0], netip.MustParseAddr("10.10.0.1"))
	a1 := join(hosts[0], netip.MustParseAddr("10.10.0.1"))
	b := join(hosts[1], netip.MustParseAddr("10.10.0.2"))
	if err := a0.id.LeaveMulticast(group); err != nil {
		t.Fatalf("first leave of the port: %v", err)
	}
	if _, err := a1.id.QP().PostRecv([]hca.RecvWR{{WRID: 1, SGL: a1.e.sge(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	ah, err := b.e.pd.CreateAH(b.ud.AHAttr)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.e.buf, "still a member")
	var wcs [1]hca.WC
	got := false
	for try := 0; try < 30 && !got; try++ {
		if _, err := b.id.QP().PostSend([]hca.SendWR{{Opcode: hca.WRSend, SGL: b.e.sge(0, 14),
			AH: ah, RemoteQPN: b.ud.QPNum, RemoteQKey: b.ud.QKey}}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
			if a1.e.cq.Poll(wcs[:]) == 1 {
				got = true
				break
			}
		}
	}
	if !got || wcs[0].Status != hca.WCSuccess || string(a1.e.buf[40:54]) != "still a member" {
		t.Fatalf("the port's other member received %v (%v) %q", got, wcs[0].Status, a1.e.buf[40:54])
	}
	if err := a1.id.LeaveMulticast(group); err != nil {
		t.Fatalf("last leave of the port: %v", err)
	}
	// The SA has lost b's membership (an SM restart, say): the SA answers b's leave with
	// an error, which rdma_leave_multicast does not return (Linux's ucma_leave_multicast).
	if err := hosts[1].LeaveMulticast(context.Background(), b.id.Device(), b.ud.AHAttr.GRH.DGID); err != nil {
		t.Fatal(err)
	}
	if err := b.id.LeaveMulticast(group); err != nil {
		t.Fatalf("leave of a membership the SA lost: %v", err)
	}
}

// TestDestroyLeavesMulticast: rdma_destroy_id of an ID still joined leaves its groups, as
// the kernel's (cma_leave_mc_groups): the port's other member keeps the group while it
// lives, and once both are destroyed the port is no member at the SA (a leave for it now
// gets the SA's refusal, where before the destroyed IDs' joins still counted).
func TestDestroyLeavesMulticast(t *testing.T) {
	hosts := ipoibHosts(t, 1)
	group := netip.MustParseAddr("224.1.2.5")
	var ids []*rdmacm.ID
	var mgid wire.GID
	for range 2 {
		ch := rdmacm.CreateEventChannel()
		id, err := rdmacm.CreateID(hosts[0], ch, nil, rdmacm.PSUDP)
		if err != nil {
			t.Fatal(err)
		}
		if err := id.BindAddr(netip.AddrPortFrom(netip.MustParseAddr("10.10.0.1"), 0)); err != nil {
			t.Fatal(err)
		}
		e := newEndpoint(t, id.Device())
		if _, err := id.CreateQP(e.pd, e.initAttr()); err != nil {
			t.Fatal(err)
		}
		if err := id.JoinMulticast(group); err != nil {
			t.Fatal(err)
		}
		ev := getEvent(t, ch, rdmacm.EventMulticastJoin)
		mgid = ev.UD.AHAttr.GRH.DGID
		ev.Ack()
		ids = append(ids, id)
	}
	dev := ids[0].Device()
	for _, id := range ids {
		if err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := hosts[0].LeaveMulticast(context.Background(), dev, mgid); err == nil {
		t.Fatalf("the port is still a member of %v after both its IDs were destroyed", group)
	}
}
