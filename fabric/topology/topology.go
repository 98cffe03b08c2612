// Package topology reads fabric descriptions in ibsim's net-file format (OFED ibsim,
// net-examples/): node records of a header line and one line per connected port,
//
//	Switch	8 "Switch1"
//	[1]	"Hca1"[1]
//	[3]	"Switch2"[3]
//
//	Hca	2 "Hca1"
//	[1]	"Switch1"[1]
//
// A header line is `Switch|Hca PORTS "ID"` (PORTS 1..254 for a switch, 1..32 for an HCA;
// ibsim also reads a GUID and a comment after the ID, which are ignored here), a port line
// `[PORT] "REMOTE_ID"[REMOTE_PORT]`; `#` starts a comment. Every link must be listed at
// both of its ends, the same way.
package topology

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// NodeType is a node's kind.
type NodeType int

const (
	Switch NodeType = iota
	HCA
)

func (t NodeType) String() string {
	if t == Switch {
		return "Switch"
	}
	return "Hca"
}

// Limits of a node's port count.
const (
	MaxSwitchPorts = 254
	MaxHCAPorts    = 32
)

// End is one end of a link: a node and its port.
type End struct {
	Node string
	Port int
}

// Node is one node record.
type Node struct {
	Type  NodeType
	ID    string
	Ports int
	// Links maps each connected local port to the far end.
	Links map[int]End
	Line  int // of the header, for messages
}

// Topology is a parsed, checked file: nodes in file order.
type Topology struct {
	Nodes []*Node
	byID  map[string]*Node
}

// Node returns the node with id, or nil.
func (t *Topology) Node(id string) *Node { return t.byID[id] }

// Switches and HCAs list the nodes of each kind in file order.
func (t *Topology) Switches() []*Node { return t.ofType(Switch) }
func (t *Topology) HCAs() []*Node     { return t.ofType(HCA) }

func (t *Topology) ofType(k NodeType) []*Node {
	var out []*Node
	for _, n := range t.Nodes {
		if n.Type == k {
			out = append(out, n)
		}
	}
	return out
}

var (
	headerRE = regexp.MustCompile(`^(Switch|Hca)\s+(\d+)\s+"([^"]+)"`)
	portRE   = regexp.MustCompile(`^\[(\d+)\]\s*"([^"]+)"\s*\[(\d+)\]`)
)

// Error is a problem with a file: the line (0 when it is about the whole file) and why.
type Error struct {
	Line   int
	Reason string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Reason
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
}

// maxLine bounds a line, and maxNodes the nodes of a file, so that a hostile file
// cannot make the parser allocate without end.
const (
	maxLine  = 4096
	maxNodes = 1 << 16
)

// Parse reads and checks a file.
func Parse(r io.Reader) (*Topology, error) {
	t := &Topology{byID: map[string]*Node{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxLine)
	var cur *Node
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		s = strings.TrimSpace(s)
		if s == "" {
			cur = nil
			continue
		}
		if m := headerRE.FindStringSubmatch(s); m != nil {
			typ := Switch
			max := MaxSwitchPorts
			if m[1] == "Hca" {
				typ, max = HCA, MaxHCAPorts
			}
			n, err := strconv.Atoi(m[2])
			if err != nil || n < 1 || n > max {
				return nil, &Error{line, fmt.Sprintf("%s %q: %s ports, want 1..%d", m[1], m[3], m[2], max)}
			}
			if t.byID[m[3]] != nil {
				return nil, &Error{line, fmt.Sprintf("node %q defined twice (first on line %d)", m[3], t.byID[m[3]].Line)}
			}
			if len(t.Nodes) == maxNodes {
				return nil, &Error{line, fmt.Sprintf("more than %d nodes", maxNodes)}
			}
			cur = &Node{Type: typ, ID: m[3], Ports: n, Links: map[int]End{}, Line: line}
			t.Nodes = append(t.Nodes, cur)
			t.byID[cur.ID] = cur
			continue
		}
		m := portRE.FindStringSubmatch(s)
		if m == nil {
			return nil, &Error{line, fmt.Sprintf("%q is neither a node header (Switch|Hca PORTS \"ID\") nor a port line ([PORT] \"ID\"[PORT])", s)}
		}
		if cur == nil {
			return nil, &Error{line, "a port line outside a node record"}
		}
		p, err1 := strconv.Atoi(m[1])
		rp, err2 := strconv.Atoi(m[3])
		if err1 != nil || err2 != nil || p < 1 || p > cur.Ports || rp < 1 || rp > MaxSwitchPorts {
			return nil, &Error{line, fmt.Sprintf("port [%s] of %q (ports 1..%d), remote port [%s]", m[1], cur.ID, cur.Ports, m[3])}
		}
		if _, dup := cur.Links[p]; dup {
			return nil, &Error{line, fmt.Sprintf("port %d of %q connected twice", p, cur.ID)}
		}
		cur.Links[p] = End{Node: m[2], Port: rp}
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{line + 1, err.Error()}
	}
	if len(t.Nodes) == 0 {
		return nil, &Error{0, "no nodes"}
	}
	// Every link at both ends, the same way.
	for _, n := range t.Nodes {
		for _, p := range slices.Sorted(maps.Keys(n.Links)) { // first problem first
			e := n.Links[p]
			far := t.byID[e.Node]
			if far == nil {
				return nil, &Error{n.Line, fmt.Sprintf("%q port %d: no node %q", n.ID, p, e.Node)}
			}
			if e.Port > far.Ports {
				return nil, &Error{n.Line, fmt.Sprintf("%q port %d: %q has no port %d", n.ID, p, e.Node, e.Port)}
			}
			if back, ok := far.Links[e.Port]; !ok || back != (End{n.ID, p}) {
				return nil, &Error{n.Line, fmt.Sprintf("%q port %d → %q port %d is not listed the other way", n.ID, p, e.Node, e.Port)}
			}
			if n.Type == HCA && far.Type == HCA {
				return nil, &Error{n.Line, fmt.Sprintf("%q port %d: HCAs linked back to back (not supported here)", n.ID, p)}
			}
		}
	}
	return t, nil
}
