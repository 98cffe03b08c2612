package sa

import (
	"sync"

	"github.com/pibgw/pibgw/hca"
	"github.com/pibgw/pibgw/wire"
)

// A port has one class 0x03 response handler, but both the SA agent (RMPP ACKs for its
// GetTable answers) and SA clients (answers to their queries) need responses there, and
// the SM's own port may host both. saMux is that one handler: RMPP ACK/STOP/ABORT go to
// the agent, everything else to the clients, each of which claims the TIDs it sent.
type saMux struct {
	port *hca.Port

	mu      sync.RWMutex
	agent   *Agent
	clients []*Client
}

var (
	saMuxMu sync.Mutex
	saMuxes = map[*hca.Port]*saMux{}
)

// muxFor returns the port's dispatcher, registering it on first use.
func muxFor(p *hca.Port) *saMux {
	saMuxMu.Lock()
	defer saMuxMu.Unlock()
	if x := saMuxes[p]; x != nil {
		return x
	}
	x := &saMux{port: p}
	saMuxes[p] = x
	p.RegisterMADHandler(wire.MgmtClassSubnAdm, true, x)
	return x
}

func (x *saMux) setAgent(a *Agent) {
	x.mu.Lock()
	x.agent = a
	x.mu.Unlock()
}

func (x *saMux) addClient(c *Client) {
	x.mu.Lock()
	x.clients = append(x.clients, c)
	x.mu.Unlock()
}

func (x *saMux) removeClient(c *Client) {
	x.mu.Lock()
	for i, y := range x.clients {
		if y == c {
			x.clients = append(x.clients[:i:i], x.clients[i+1:]...)
			break
		}
	}
	x.mu.Unlock()
}

// HandleMAD dispatches one class 0x03 response.
func (x *saMux) HandleMAD(m *hca.MAD) {
	r := wire.RMPPOf(wire.MAD(m.Data))
	x.mu.RLock()
	agent := x.agent
	var one *Client
	var many []*Client
	if len(x.clients) == 1 {
		one = x.clients[0]
	} else {
		many = x.clients
	}
	x.mu.RUnlock()
	if r.Active() && r.Type() != wire.RMPPTypeData && agent != nil && agent.rmppControl(m) {
		return
	}
	if one != nil {
		one.handleResponse(m)
		return
	}
	for _, c := range many {
		if c.handleResponse(m) {
			return
		}
	}
}
