package main

import "github.com/pibgw/pibgw/internal/control"

// devJSON is one device in `pibgw devinfo --json`. Field names are ibv_devinfo's (and
// ibv_device_attr's); GUIDs keep devinfo's text form so 64-bit values survive JSON
// readers that hold numbers as doubles.
type devJSON struct {
	HCAID                 string     `json:"hca_id"`
	Transport             string     `json:"transport"`
	FWVer                 string     `json:"fw_ver"`
	NodeGUID              string     `json:"node_guid"`
	SysImageGUID          string     `json:"sys_image_guid"`
	VendorID              uint32     `json:"vendor_id"`
	VendorPartID          uint32     `json:"vendor_part_id"`
	HWVer                 uint32     `json:"hw_ver"`
	PhysPortCnt           int        `json:"phys_port_cnt"`
	MaxMRSize             uint64     `json:"max_mr_size"`
	PageSizeCap           uint64     `json:"page_size_cap"`
	MaxQP                 int        `json:"max_qp"`
	MaxQPWR               int        `json:"max_qp_wr"`
	DeviceCapFlags        uint32     `json:"device_cap_flags"`
	DeviceCapFlagNames    []string   `json:"device_cap_flag_names"`
	MaxSGE                int        `json:"max_sge"`
	MaxSGERd              int        `json:"max_sge_rd"`
	MaxCQ                 int        `json:"max_cq"`
	MaxCQE                int        `json:"max_cqe"`
	MaxMR                 int        `json:"max_mr"`
	MaxPD                 int        `json:"max_pd"`
	MaxQPRdAtom           int        `json:"max_qp_rd_atom"`
	MaxEERdAtom           int        `json:"max_ee_rd_atom"`
	MaxResRdAtom          int        `json:"max_res_rd_atom"`
	MaxQPInitRdAtom       int        `json:"max_qp_init_rd_atom"`
	MaxEEInitRdAtom       int        `json:"max_ee_init_rd_atom"`
	AtomicCap             string     `json:"atomic_cap"`
	MaxEE                 int        `json:"max_ee"`
	MaxRDD                int        `json:"max_rdd"`
	MaxMW                 int        `json:"max_mw"`
	MaxRawIPv6QP          int        `json:"max_raw_ipv6_qp"`
	MaxRawEthyQP          int        `json:"max_raw_ethy_qp"`
	MaxMcastGrp           int        `json:"max_mcast_grp"`
	MaxMcastQPAttach      int        `json:"max_mcast_qp_attach"`
	MaxTotalMcastQPAttach int        `json:"max_total_mcast_qp_attach"`
	MaxAH                 int        `json:"max_ah"`
	MaxFMR                int        `json:"max_fmr"`
	MaxMapPerFMR          int        `json:"max_map_per_fmr"`
	MaxSRQ                int        `json:"max_srq"`
	MaxSRQWR              int        `json:"max_srq_wr"`
	MaxSRQSGE             int        `json:"max_srq_sge"`
	MaxPKeys              int        `json:"max_pkeys"`
	LocalCAAckDelay       uint8      `json:"local_ca_ack_delay"`
	MaxInlineData         int        `json:"max_inline_data"`
	Ports                 []portJSON `json:"ports"`
}

// portJSON is one port: states by devinfo's names, MTUs in bytes, width and speed as
// devinfo prints them.
type portJSON struct {
	Port          int      `json:"port"`
	State         string   `json:"state"`
	MaxMTU        int      `json:"max_mtu"`
	ActiveMTU     int      `json:"active_mtu"`
	SMLID         uint16   `json:"sm_lid"`
	PortLID       uint16   `json:"port_lid"`
	PortLMC       uint8    `json:"port_lmc"`
	LinkLayer     string   `json:"link_layer"`
	MaxMsgSz      uint32   `json:"max_msg_sz"`
	PortCapFlags  uint32   `json:"port_cap_flags"`
	MaxVLNum      string   `json:"max_vl_num"`
	BadPKeyCntr   uint32   `json:"bad_pkey_cntr"`
	QKeyViolCntr  uint32   `json:"qkey_viol_cntr"`
	SMSL          uint8    `json:"sm_sl"`
	PKeyTblLen    int      `json:"pkey_tbl_len"`
	GIDTblLen     int      `json:"gid_tbl_len"`
	SubnetTimeout uint8    `json:"subnet_timeout"`
	InitTypeReply uint8    `json:"init_type_reply"`
	ActiveWidth   string   `json:"active_width"`
	ActiveSpeed   string   `json:"active_speed"`
	PhysState     string   `json:"phys_state"`
	PortGUID      string   `json:"port_guid"`
	GIDs          []string `json:"gids"` // non-null entries, as devinfo -v lists them
}

func deviceJSON(d control.Device, onlyPort int) devJSON {
	a := d.Attr
	j := devJSON{
		HCAID: d.Name, Transport: "InfiniBand", FWVer: a.FWVer,
		NodeGUID: guidStr(a.NodeGUID), SysImageGUID: guidStr(a.SysImageGUID),
		VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
		PhysPortCnt: a.PhysPortCnt, MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
		MaxQP: a.MaxQP, MaxQPWR: a.MaxQPWR, DeviceCapFlags: a.DeviceCapFlags,
		DeviceCapFlagNames: capFlagNames(a.DeviceCapFlags),
		MaxSGE:             a.MaxSGE, MaxSGERd: a.MaxSGERd, MaxCQ: a.MaxCQ, MaxCQE: a.MaxCQE,
		MaxMR: a.MaxMR, MaxPD: a.MaxPD, MaxQPRdAtom: a.MaxQPRdAtom, MaxEERdAtom: a.MaxEECRdAtom,
		MaxResRdAtom: a.MaxResRdAtom, MaxQPInitRdAtom: a.MaxQPInitRdAtom,
		MaxEEInitRdAtom: a.MaxEEInitRdAtom, AtomicCap: atomicCapStr(a.AtomicCap),
		MaxEE: a.MaxEE, MaxRDD: a.MaxRDD, MaxMW: a.MaxMW, MaxRawIPv6QP: a.MaxRawIPv6QP,
		MaxRawEthyQP: a.MaxRawEthyQP, MaxMcastGrp: a.MaxMcastGrp,
		MaxMcastQPAttach: a.MaxMcastQPAttach, MaxTotalMcastQPAttach: a.MaxTotalMcastQPAttach,
		MaxAH: a.MaxAH, MaxFMR: a.MaxFMR, MaxMapPerFMR: a.MaxMapPerFMR, MaxSRQ: a.MaxSRQ,
		MaxSRQWR: a.MaxSRQWR, MaxSRQSGE: a.MaxSRQSGE, MaxPKeys: a.MaxPKeys,
		LocalCAAckDelay: a.LocalCAAckDelay, MaxInlineData: a.MaxInlineData,
		Ports: []portJSON{},
	}
	for _, port := range d.Ports {
		n := port.Num
		if onlyPort != 0 && n != onlyPort {
			continue
		}
		pa := port.Attr
		pj := portJSON{
			Port: n, State: portStateStr(pa.State), MaxMTU: pa.MaxMTU.Bytes(),
			ActiveMTU: pa.ActiveMTU.Bytes(), SMLID: pa.SMLID, PortLID: pa.LID, PortLMC: pa.LMC,
			LinkLayer: linkLayerStr(pa.LinkLayer), MaxMsgSz: pa.MaxMsgSz,
			PortCapFlags: pa.PortCapFlags, MaxVLNum: vlStr(pa.MaxVLNum),
			BadPKeyCntr: pa.BadPKeyCntr, QKeyViolCntr: pa.QKeyViolCntr, SMSL: pa.SMSL,
			PKeyTblLen: pa.PKeyTblLen, GIDTblLen: pa.GIDTblLen,
			SubnetTimeout: pa.SubnetTimeout, InitTypeReply: pa.InitTypeReply,
			ActiveWidth: widthStr(pa.ActiveWidth) + "X", ActiveSpeed: speedStr(pa.ActiveSpeed),
			PhysState: physStateStr(pa.PhysState), PortGUID: guidStr(pa.GUID), GIDs: []string{},
		}
		for _, g := range port.GIDs {
			if g.InterfaceID() != 0 {
				pj.GIDs = append(pj.GIDs, gidStr(g))
			}
		}
		j.Ports = append(j.Ports, pj)
	}
	return j
}
