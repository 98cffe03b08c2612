"""pyverbs_fork: pyverbs (rdma-core's Python bindings) on pibgw's libraries, with a process
forked by multiprocessing (the fork start method) after the parent used verbs and rdma_cm:
an RC SEND each way between a QP the parent made before the fork (pib_0) and one the child
made (pib_1), then an rdma_cm connection from an ID the child made to a listener the parent
made before the fork, with a message each way. Prints "ok NAME" per step; exits non-zero at
the first failure. Run with /usr/bin/python3 (Debian's python3-pyverbs)."""

import multiprocessing as mp
import sys
import time

import pyverbs.cm_enums as ce
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cmid import CMID, AddrInfo
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

SIZE = 64
CM_PORT = "7471"
LISTEN_ADDR = "10.10.0.2"  # pib_1's IPoIB address on the test fabric
CLIENT_ADDR = "10.10.0.1"  # pib_0's


class End:
    """A device, PD, CQ, region and RC QP."""

    def __init__(self, dev):
        self.ctx = Context(name=dev)
        self.lid = self.ctx.query_port(1).lid
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16, None, None, 0)
        self.mr = MR(self.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))

    def connect(self, lid, qpn):
        a = QPAttr(port_num=1)
        a.path_mtu = e.IBV_MTU_1024
        a.max_dest_rd_atomic = 1
        a.max_rd_atomic = 1
        a.min_rnr_timer = 12
        a.timeout = 14
        a.retry_cnt = 7
        a.rnr_retry = 7
        a.dest_qp_num = qpn
        a.ah_attr = AHAttr(port_num=1, dlid=lid)
        self.qp.to_rts(a)

    def post_recv(self):
        self.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(self.mr.buf, SIZE, self.mr.lkey)]))

    def send(self, text):
        self.mr.write(text.ljust(SIZE, "\0"), SIZE)
        self.qp.post_send(SendWR(wr_id=2, num_sge=1, sg=[SGE(self.mr.buf, SIZE, self.mr.lkey)]))
        self.wait("send")

    def wait(self, what):
        deadline = time.time() + 10
        while time.time() < deadline:
            n, wcs = self.cq.poll()
            if n:
                if wcs[0].status != e.IBV_WC_SUCCESS:
                    raise RuntimeError(f"{what}: completion status {wcs[0].status}")
                return wcs[0]
        raise RuntimeError(f"{what}: no completion in 10 s")

    def received(self):
        self.wait("recv")
        return self.mr.read(SIZE, 0).rstrip(b"\0").decode()


def child(conn, parent_lid, parent_qpn):
    try:
        # Verbs: the child's own objects on pib_1, connected to the parent's QP.
        me = End("pib_1")
        me.connect(parent_lid, parent_qpn)
        me.post_recv()
        conn.send((me.lid, me.qp.qp_num))
        if me.received() != "parent to child":
            raise RuntimeError("the parent's message arrived wrong")
        me.send("child to parent")
        conn.send("verbs done")

        # rdma_cm: the child's ID connects to the listener the parent made before the fork.
        ai = AddrInfo(src=CLIENT_ADDR, dst=LISTEN_ADDR, dst_service=CM_PORT, port_space=ce.RDMA_PS_TCP)
        cap = QPCap(max_send_wr=2, max_recv_wr=2)
        cm = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap))
        mr = cm.reg_msgs(SIZE)
        cm.post_recv(mr)  # before the connection, so the parent's first SEND finds it
        cm.connect()
        cm.get_recv_comp()
        got = mr.read(SIZE, 0).rstrip(b"\0").decode()
        if got != "cm parent to child":
            raise RuntimeError(f"rdma_cm message from the parent: {got!r}")
        mr.write("cm child to parent".ljust(SIZE, "\0"), SIZE)
        cm.post_send(mr, 0, SIZE)
        cm.get_send_comp()
        conn.send("cm done")
        conn.recv()  # the parent has the message: both sides disconnect
        cm.disconnect()  # synchronous: until DISCONNECTED (the parent's DREP or DREQ)
        conn.close()
    except Exception as ex:  # reported to the parent, which fails
        conn.send(f"child failed: {ex!r}")
        sys.exit(1)


def main():
    # The parent uses verbs and rdma_cm before it forks.
    me = End("pib_0")
    ai = AddrInfo(src=LISTEN_ADDR, src_service=CM_PORT, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    cap = QPCap(max_send_wr=2, max_recv_wr=2)
    listener = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap))
    listener.listen()
    print("ok parent_objects", flush=True)

    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=child, args=(there, me.lid, me.qp.qp_num))
    p.start()

    def expect(want):
        if not here.poll(30):
            raise RuntimeError(f"the child said nothing in 30 s (waiting for {want})")
        got = here.recv()
        if isinstance(got, str) and got.startswith("child failed"):
            raise RuntimeError(got)
        return got

    lid, qpn = expect("its QP")
    me.connect(lid, qpn)
    me.post_recv()
    me.send("parent to child")
    if me.received() != "child to parent":
        raise RuntimeError("the child's message arrived wrong")
    expect("verbs done")
    print("ok rc_send_recv_parent_child", flush=True)

    conn = listener.get_request()
    mr = conn.reg_msgs(SIZE)
    conn.post_recv(mr)
    conn.accept()
    mr.write("cm parent to child".ljust(SIZE, "\0"), SIZE)
    conn.post_send(mr, 0, SIZE)
    conn.get_send_comp()
    conn.get_recv_comp()
    got = mr.read(SIZE, 0).rstrip(b"\0").decode()
    if got != "cm child to parent":
        raise RuntimeError(f"rdma_cm message from the child: {got!r}")
    expect("cm done")
    here.send("bye")
    # A synchronous rdma_disconnect waits for DISCONNECTED, which the child's DREQ gives here
    # and this DREQ (or the DREP) gives the child: without it the child waits out its DREQ's
    # timeout, as with the kernel's CM.
    conn.disconnect()
    p.join(30)
    if p.exitcode != 0:
        raise RuntimeError(f"child exit code {p.exitcode}")
    print("ok rdma_cm_parent_child", flush=True)


if __name__ == "__main__":
    main()
