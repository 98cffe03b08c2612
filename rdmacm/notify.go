package rdmacm

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/rdmacm/ibcm"
)

// Notify is rdma_notify: the consumer tells the CM of an affiliated event of the ID's QP.
// IBV_EVENT_COMM_EST — the QP received data before the RTU — establishes a passive ID
// whose RTU was lost or is late (the kernel's rdma_notify → ib_cm_notify → cm_establish):
// ESTABLISHED follows; an ID already established gets EISCONN, one in another state
// EINVAL. IBV_EVENT_LID_CHANGE is accepted and changes nothing; other events, and an ID
// with no IB CM ID, EINVAL.
func (id *ID) Notify(ev hca.EventType) error {
	id.mu.Lock()
	c := id.cmid
	id.mu.Unlock()
	if c == nil {
		return fmt.Errorf("rdmacm: notify: no connection: %w", syscall.EINVAL)
	}
	switch ev {
	case hca.EventCommEst:
		err := c.Established()
		if errors.Is(err, ibcm.ErrState) {
			return fmt.Errorf("rdmacm: notify: %v: %w", err, syscall.EINVAL)
		}
		return err
	case hca.EventLIDChange:
		return nil
	}
	return fmt.Errorf("rdmacm: notify: event %s: %w", ev, syscall.EINVAL)
}
