package udplink

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"

	"github.com/pibgw/pibgw/fabric"
)

// SwitchPorts is an Acceptor that hands out a switch's ports by port GUID: a host gets
// the port its GUID had before (a reconnecting host finds its port, and its LID, again);
// a new GUID gets a port never used, else the port that has been free the longest.
type SwitchPorts struct {
	port   func(num int) fabric.Port
	nums   []int // the ports hosts may have, in order
	mu     sync.Mutex
	owner  map[int]uint64 // port → GUID it belongs to
	byGUID map[uint64]int
	live   map[int]netip.AddrPort // ports with a session, and where from
	freed  []int                  // ports whose session ended, oldest first
	local  map[uint64]string      // GUIDs of the switch process's own ports (Reserve)
}

// NewSwitchPorts serves ports nums; port returns the fabric.Port of a number (a switch
// port, or the UDP side of a Jack cabled to one).
func NewSwitchPorts(nums []int, port func(num int) fabric.Port) *SwitchPorts {
	return &SwitchPorts{port: port, nums: nums, owner: map[int]uint64{}, byGUID: map[uint64]int{},
		live: map[int]netip.AddrPort{}, local: map[uint64]string{}}
}

// Reserve keeps guid, the GUID of a port inside the switch process (what names it: "pib_0
// port 1"), from hosts: a host whose port has it is refused, where it would otherwise
// get a port the SM cannot bring up (two ports with one GUID; opensm's ERR 0D01).
func (s *SwitchPorts) Reserve(guid uint64, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.local[guid] = what
}

// AllPorts serves every port of sw directly (no Jacks): for tests and fabrics without
// captures.
func AllPorts(sw *fabric.Switch) *SwitchPorts {
	var nums []int
	for i := 1; i <= sw.NumPorts(); i++ {
		nums = append(nums, i)
	}
	return NewSwitchPorts(nums, sw.Port)
}

// Accept implements Acceptor.
func (s *SwitchPorts) Accept(guid uint64, from netip.AddrPort) (fabric.Port, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if what, ok := s.local[guid]; ok {
		return nil, 0, fmt.Errorf("port GUID %#016x is the switch process's own %s (each host needs its own fabric.node_guid_base)", guid, what)
	}
	num, ok := s.byGUID[guid]
	if ok {
		// Two hosts with one GUID (node_guid_base not set apart) must not take turns
		// with the port; the same host from a new socket waits until its old session
		// is dead.
		if at, live := s.live[num]; live && at != from {
			return nil, 0, fmt.Errorf("port GUID %#016x is connected from %s (each host needs its own fabric.node_guid_base)", guid, at)
		}
	} else {
		num = s.pickLocked()
		if num == 0 {
			return nil, 0, fmt.Errorf("%w: all %d ports are in use", ErrFull, len(s.nums))
		}
		if old, had := s.owner[num]; had {
			delete(s.byGUID, old)
		}
		s.owner[num], s.byGUID[guid] = guid, num
	}
	s.live[num] = from
	s.removeFreedLocked(num)
	return s.port(num), num, nil
}

// pickLocked returns a port for a new GUID, or 0.
func (s *SwitchPorts) pickLocked() int {
	for _, n := range s.nums {
		if _, used := s.owner[n]; !used {
			return n
		}
	}
	if len(s.freed) > 0 {
		return s.freed[0]
	}
	return 0
}

func (s *SwitchPorts) removeFreedLocked(num int) {
	for i, n := range s.freed {
		if n == num {
			s.freed = append(s.freed[:i], s.freed[i+1:]...)
			return
		}
	}
}

// Release implements Acceptor: the port stays its GUID's until a new GUID needs it.
func (s *SwitchPorts) Release(num int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live[num]; ok {
		delete(s.live, num)
		s.freed = append(s.freed, num)
	}
}

// Assignment is one port's owner.
type Assignment struct {
	Port int
	GUID uint64
	Live bool
}

// Assignments lists the ports that have an owner, by port.
func (s *SwitchPorts) Assignments() []Assignment {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Assignment, 0, len(s.owner))
	for n, g := range s.owner {
		_, live := s.live[n]
		out = append(out, Assignment{Port: n, GUID: g, Live: live})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}
