package sa_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/wire"
)

// FuzzSAQuery sends the SA requests of any method, attribute, component mask and record
// bytes from a port of the fabric, as a client through libumad2sim or a host of a
// multi-host fabric can. A request method (Get, Set, GetTable, Delete) must be answered —
// with records or a status — and whatever came, the SA must still answer a PathRecord
// query after it. Joins, leaves and service registrations it accepts stay in its state,
// so later inputs meet a changed SA, as a long-running one would.
func FuzzSAQuery(f *testing.F) {
	pr := make([]byte, wire.PathRecordLen)
	mc := make([]byte, wire.MCMemberRecordLen)
	copy(mc, []byte{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff})
	for _, s := range []struct {
		method uint8
		attr   uint16
		mask   uint64
		rec    []byte
	}{
		{wire.MethodGet, wire.AttrPathRecord, wire.PRCompDLID | wire.PRCompSLID, pr},
		{wire.MethodGetTable, wire.AttrPathRecord, 0, nil},
		{wire.MethodSet, wire.AttrMCMemberRecord, ^uint64(0), mc},
		{wire.MethodDelete, wire.AttrMCMemberRecord, 0x3, mc},
		{wire.MethodGetTable, wire.AttrNodeRecord, 0, nil},
		{wire.MethodGet, wire.AttrPortInfoRecord, 1, make([]byte, 58)},
		{wire.MethodSet, wire.AttrServiceRecord, wire.SRCompID, make([]byte, wire.ServiceRecordLen)},
		{wire.MethodDelete, wire.AttrServiceRecord, ^uint64(0), make([]byte, wire.ServiceRecordLen)},
		{wire.MethodGetTable, wire.AttrLinkRecord, 0, nil},
		{wire.MethodGetTable, wire.AttrSwitchInfoRecord, 0, nil},
		{wire.MethodGetTable, wire.AttrLinearFwdTableRecord, 0, nil},
		{wire.MethodGetTable, wire.AttrMulticastFwdTblRecord, 0, nil},
		{wire.MethodGetTable, wire.AttrPKeyTableRecord, 0, nil},
		{wire.MethodGetTable, wire.AttrGUIDInfoRecord, 0, nil},
		{wire.MethodGetTable, wire.AttrSMInfoRecord, 0, nil},
		{wire.MethodGet, wire.AttrClassPortInfo, 0, nil},
		{wire.MethodSet, wire.AttrClassPortInfo, 0, nil},
		{wire.MethodGet, 0xFFFF, ^uint64(0), []byte{1, 2, 3}},
		{0x7F, wire.AttrPathRecord, 0, nil},
	} {
		f.Add(s.method, s.attr, s.mask, s.rec)
	}
	fab := satest.OneSwitch(f, 3, satest.Options{})
	s := newSAFabric(f, fab, sa.Config{}, sa.ClientOptions{PathTTL: -1, Timeout: 2 * time.Second, Retries: 1})
	c, peer := s.clients[1], s.f.Ports()[2]
	f.Fuzz(func(t *testing.T, method uint8, attr uint16, mask uint64, rec []byte) {
		if len(rec) > wire.SADataLen {
			rec = rec[:wire.SADataLen]
		}
		request := method == wire.MethodGet || method == wire.MethodSet || method == wire.MethodGetTable || method == wire.MethodDelete
		wait := 5 * time.Second
		if !request {
			wait = 50 * time.Millisecond // not a request the SA answers: only, no crash
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := c.Query(ctx, method, attr, mask, rec)
		cancel()
		if request && (errors.Is(err, sa.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)) {
			t.Fatalf("method %#x attribute %#x mask %#x: no answer: %v", method, attr, mask, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.QueryPath(ctx, sa.PathQuery{DLID: peer.LID()}); err != nil {
			t.Fatalf("after method %#x attribute %#x mask %#x: PathRecord: %v", method, attr, mask, err)
		}
	})
}
