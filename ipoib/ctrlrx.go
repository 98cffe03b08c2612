package ipoib

// Control packets received (ARP, ND) are answered on their own goroutine, not in the
// receive completion handler: answering takes the neighbour lock, posts sends and may
// start resolutions, and the handler runs on the goroutine that delivered the packets
// (in process, the sender's), which must only move data. The queue between them is
// bounded like the kernel's input backlog (net.core.netdev_max_backlog): a flood is
// dropped and counted (drop_ctrl_overflow), never queued without limit.

// ctrlRxLen bounds the control packets waiting to be answered.
const ctrlRxLen = 256

// ctrlPacket is a received ARP or ND packet, copied out of the receive buffer (which is
// re-posted at once).
type ctrlPacket struct {
	etype uint16
	pkt   []byte
}

// queueControl hands a control packet to the control receiver; it never blocks.
func (i *Interface) queueControl(etype uint16, payload []byte) {
	p := ctrlPacket{etype: etype, pkt: append([]byte(nil), payload...)}
	select {
	case i.ctl.rx <- p:
	default:
		i.cnt.inc(cDropCtrlOverflow)
	}
}

// controlReceiver answers queued control packets until the interface closes.
func (i *Interface) controlReceiver() {
	defer i.wg.Done()
	for {
		select {
		case <-i.ctx.Done():
			return
		case p := <-i.ctl.rx:
			ls := i.link.Load()
			if !ls.up {
				i.cnt.inc(cDropDown)
				continue
			}
			switch p.etype {
			case EtherTypeARP:
				i.handleARP(p.pkt, ls)
			case EtherTypeIPv6:
				i.handleND(p.pkt)
			}
		}
	}
}
