// Package hca is the soft Host Channel Adapter: devices (pib_0, …), ports, and the verbs
// objects (context, PD, MR, CQ, completion channel, QP, SRQ, AH) with the semantics
// libibverbs documents. Transports (ud/, rc/) plug in through the Transport interface and
// drive the queues through the exported driver methods of QP, CQ and Port.
//
// Enumerations carry libibverbs' numeric values so that a reader (and a JSON dump) matches
// verbs.h.
package hca

import "fmt"

// QPType is ibv_qp_type.
type QPType uint8

const (
	QPTypeRC  QPType = 2
	QPTypeUC  QPType = 3
	QPTypeUD  QPType = 4
	QPTypeSMI QPType = 0x10 // QP0, the subnet management interface (kernel IB_QPT_SMI)
	QPTypeGSI QPType = 0x11 // QP1, the general services interface (kernel IB_QPT_GSI)
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeSMI:
		return "SMI"
	case QPTypeGSI:
		return "GSI"
	case QPTypeXRCSend:
		return "XRC_SEND"
	case QPTypeXRCRecv:
		return "XRC_RECV"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// datagram reports whether the type uses the UD transport (UD, SMI, GSI).
func (t QPType) datagram() bool { return t == QPTypeUD || t == QPTypeSMI || t == QPTypeGSI }

// QPState is ibv_qp_state (IBA 10.3.1).
type QPState uint8

const (
	QPStateReset QPState = 0
	QPStateInit  QPState = 1
	QPStateRTR   QPState = 2
	QPStateRTS   QPState = 3
	QPStateSQD   QPState = 4
	QPStateSQE   QPState = 5
	QPStateErr   QPState = 6
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QPAttrMask is ibv_qp_attr_mask: which fields of a QPAttr a ModifyQP call sets.
type QPAttrMask uint32

const (
	QPAttrState            QPAttrMask = 1 << 0 // IBV_QP_STATE
	QPAttrCurState         QPAttrMask = 1 << 1
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	QPAttrAccessFlags      QPAttrMask = 1 << 3
	QPAttrPKeyIndex        QPAttrMask = 1 << 4
	QPAttrPort             QPAttrMask = 1 << 5
	QPAttrQKey             QPAttrMask = 1 << 6
	QPAttrAV               QPAttrMask = 1 << 7
	QPAttrPathMTU          QPAttrMask = 1 << 8
	QPAttrTimeout          QPAttrMask = 1 << 9
	QPAttrRetryCnt         QPAttrMask = 1 << 10
	QPAttrRNRRetry         QPAttrMask = 1 << 11
	QPAttrRQPSN            QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	QPAttrAltPath          QPAttrMask = 1 << 14
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15
	QPAttrSQPSN            QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	QPAttrPathMigState     QPAttrMask = 1 << 18
	QPAttrCap              QPAttrMask = 1 << 19
	QPAttrDestQPN          QPAttrMask = 1 << 20
)

var qpAttrMaskNames = [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS",
	"PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
	"RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC",
	"PATH_MIG_STATE", "CAP", "DEST_QPN"}

func (m QPAttrMask) String() string {
	s := ""
	for i, n := range qpAttrMaskNames {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += "IBV_QP_" + n
		}
	}
	if s == "" {
		return "0"
	}
	return s
}

// AccessFlags is ibv_access_flags.
type AccessFlags uint32

const (
	AccessLocalWrite   AccessFlags = 1 << 0
	AccessRemoteWrite  AccessFlags = 1 << 1
	AccessRemoteRead   AccessFlags = 1 << 2
	AccessRemoteAtomic AccessFlags = 1 << 3
	AccessMWBind       AccessFlags = 1 << 4
	AccessZeroBased    AccessFlags = 1 << 5
)

// MTU is ibv_mtu: the IBA encoding of a path MTU (IBA 14.2.5.6).
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 for an invalid encoding.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the encoding of n bytes (256…4096), or 0.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

func (m MTU) String() string { return fmt.Sprintf("%d (%d)", m.Bytes(), uint8(m)) }

// PortState is ibv_port_state (IBA 14.2.5.6 PortInfo:PortState).
type PortState uint8

const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

var portStateNames = [...]string{"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"}

func (s PortState) String() string {
	if int(s) < len(portStateNames) {
		return portStateNames[s]
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// PhysState is PortInfo:PortPhysicalState (IBA 14.2.5.6).
type PhysState uint8

const (
	PhysSleep            PhysState = 1
	PhysPolling          PhysState = 2
	PhysDisabled         PhysState = 3
	PhysPortConfTraining PhysState = 4
	PhysLinkUp           PhysState = 5
	PhysLinkErrRecovery  PhysState = 6
)

var physStateNames = [...]string{"", "Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp", "LinkErrorRecovery"}

func (s PhysState) String() string {
	if s >= 1 && int(s) < len(physStateNames) {
		return physStateNames[s]
	}
	return fmt.Sprintf("PhysState(%d)", uint8(s))
}

// WROpcode is ibv_wr_opcode.
type WROpcode uint8

const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
)

var wrOpcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM",
	"RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return "IBV_WR_" + wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// SendFlags is ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
	// SendIPCsum is IBV_SEND_IP_CSUM: the HCA finishes a checksum the sender started
	// (Linux's CHECKSUM_PARTIAL), as HCAs with IBV_DEVICE_UD_IP_CSUM do for Linux's ipoib.
	// Where it lies is in the WR (SendWR.CsumStart, CsumOffset), so the HCA needs to
	// know nothing of IP. UD only.
	SendIPCsum SendFlags = 1 << 4
)

// WCStatus is ibv_wc_status.
type WCStatus uint8

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRdReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR",
	"LOC_PROT_ERR", "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR",
	"REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR",
	"LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR",
	"INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR"}

// String returns the IBV_WC_* name, as ibv_wc_status_str does without the prefix.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return "IBV_WC_" + wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode is ibv_wc_opcode.
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "IBV_WC_SEND"
	case WCRDMAWrite:
		return "IBV_WC_RDMA_WRITE"
	case WCRDMARead:
		return "IBV_WC_RDMA_READ"
	case WCCompSwap:
		return "IBV_WC_COMP_SWAP"
	case WCFetchAdd:
		return "IBV_WC_FETCH_ADD"
	case WCBindMW:
		return "IBV_WC_BIND_MW"
	case WCLocalInv:
		return "IBV_WC_LOCAL_INV"
	case WCRecv:
		return "IBV_WC_RECV"
	case WCRecvRDMAWithImm:
		return "IBV_WC_RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags is ibv_wc_flags.
type WCFlags uint32

const (
	WCGRH      WCFlags = 1 << 0
	WCWithImm  WCFlags = 1 << 1
	WCIPCsumOK WCFlags = 1 << 2
	WCWithInv  WCFlags = 1 << 3
	// WCIPCsumPartial (a pibgw extension, set only for QPs created with
	// QPInitAttr.IPCsumPartial, always with WCIPCsumOK) says the received IP packet is
	// intact but its TCP/UDP checksum field holds only the pseudo-header sum: it came
	// from an in-process sender's SendIPCsum, and the receiver passes it on as
	// CHECKSUM_PARTIAL instead of having the HCA compute the sum.
	WCIPCsumPartial WCFlags = 1 << 16
)

// SGE is ibv_sge: a piece of registered memory, by virtual address and local key.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is ibv_send_wr. The SGL is read during PostSend (UD) or until the WR completes
// (RC), like the memory it points to.
type SendWR struct {
	WRID      uint64
	SGL       []SGE
	Opcode    WROpcode
	SendFlags SendFlags
	ImmData   uint32 // host order; carried big-endian in ImmDt
	// CsumStart and CsumOffset go with SendIPCsum, as virtio-net's csum_start and
	// csum_offset and mlx5's checksum offsets: the HCA sums the message from byte
	// CsumStart to its end, adding what the 16-bit field at CsumStart+CsumOffset holds
	// (the pseudo-header sum), and stores the complement of the folded sum there (RFC
	// 1071). CsumNoZero stores a result of 0 as 0xFFFF, for checksums where zero means
	// "none" (UDP, RFC 768); TCP's is stored as computed (RFC 1624). A field outside the
	// message completes the WR with WCLocQPOpErr.
	CsumStart, CsumOffset uint16
	CsumNoZero            bool
	// InvalidateRKey is the R_Key a SEND_WITH_INV invalidates at the responder.
	InvalidateRKey uint32

	// UD: address handle, remote QPN and Q_Key (IBA C10-15: a Q_Key with the top bit set
	// means "use the QP's own Q_Key").
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32

	// XRC send QPs: the XRC SRQ at the remote domain (ibv_send_wr.qp_type.xrc.remote_srqn).
	RemoteSRQN uint32

	// RDMA and atomics.
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64

	// Bind is what a BIND_MW WR binds (ibv_send_wr.bind_mw).
	Bind MWBind

	inline    []byte
	bindType1 bool // a BIND_MW of a type 1 window, posted by BindMW (ibv_bind_mw) // a copy of inline data for a WR queued while the QP is in SQD
}

// RecvWR is ibv_recv_wr.
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// WC is ibv_wc.
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// ImmData is the immediate value (host order) when WCFlags has WCWithImm; the
	// invalidated R_Key when it has WCWithInv.
	ImmData      uint32
	QPNum        uint32
	SrcQP        uint32
	WCFlags      WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	// Timestamp is the device clock (Device.CoreClock) when the completion was made, on a
	// CQ with SetTimestamps (ibv_wc_read_completion_ts); 0 on others.
	Timestamp uint64
}

// GlobalRoute is ibv_global_route: the GRH fields of an address vector.
type GlobalRoute struct {
	DGID         [16]byte
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is ibv_ah_attr: an address vector.
type AHAttr struct {
	GRH         GlobalRoute
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	PortNum     uint8
}

// QPCap is ibv_qp_cap.
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPInitAttr is ibv_qp_init_attr.
type QPInitAttr struct {
	SendCQ   *CQ
	RecvCQ   *CQ
	SRQ      *SRQ
	Cap      QPCap
	QPType   QPType
	SQSigAll bool
	// Port is the port of a special QP (SMI/GSI); ordinary QPs get theirs from ModifyQP.
	Port uint8
	// IPCsumPartial (pibgw extension, UD and RC) lets receives complete with
	// WCIPCsumPartial rather than the HCA computing deferred TCP/UDP checksums.
	IPCsumPartial bool
}

// QPAttr is ibv_qp_attr.
type QPAttr struct {
	QPState          QPState
	CurQPState       QPState
	PathMTU          MTU
	PathMigState     uint8
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPNum        uint32
	QPAccessFlags    AccessFlags
	Cap              QPCap
	AHAttr           AHAttr
	AltAHAttr        AHAttr
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	AltPortNum       uint8
	AltTimeout       uint8
}

// EventType is ibv_event_type.
type EventType uint8

const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventPathMig          EventType = 6
	EventPathMigErr       EventType = 7
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventLIDChange        EventType = 11
	EventPKeyChange       EventType = 12
	EventSMChange         EventType = 13
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventClientReregister EventType = 17
	EventGIDChange        EventType = 18
)

var eventNames = [...]string{"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST",
	"SQ_DRAINED", "PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR",
	"LID_CHANGE", "PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED",
	"QP_LAST_WQE_REACHED", "CLIENT_REREGISTER", "GID_CHANGE"}

func (e EventType) String() string {
	if int(e) < len(eventNames) {
		return "IBV_EVENT_" + eventNames[e]
	}
	return fmt.Sprintf("EventType(%d)", uint8(e))
}

// AsyncEvent is ibv_async_event: the element names the object it concerns.
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port uint8
}
