package sa

import (
	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// SMInfo (IBA 14.2.5.13): the SM answers SubnGet(SMInfo) on its port with its GUID (the
// port GUID), SM_Key, ActCount (SMPs sent), Priority and SMState MASTER. SubnSet (the
// handover protocol of IBA 14.4.1) is not supported: pibgw runs one SM per subnet.

func (sm *SM) registerSMInfo() {
	sm.port.SetSMInfoAgent(hca.SMInfoFunc(sm.smInfo))
}

func (sm *SM) unregisterSMInfo() { sm.port.SetSMInfoAgent(nil) }

func (sm *SM) smInfo(method uint8, _ uint32, data []byte) uint16 {
	clear(data[:wire.SMPDataLen])
	be.PutUint64(data[smiGUID:], sm.port.GUID())
	if method == wire.MethodGet {
		// IBA 14.2.5.13: SM_Key reads as zero unless the requester proved it knows it.
		be.PutUint64(data[smiSMKey:], 0)
	}
	be.PutUint32(data[smiActCount:], uint32(sm.smpSent.Load()))
	data[smiPrioSt] = sm.cfg.Priority<<4 | SMStateMaster
	if method != wire.MethodGet {
		return wire.StatusMethodAttrNotSupp
	}
	return 0
}
