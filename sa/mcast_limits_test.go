package sa_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/pibgw/pibgw/sa"
	"github.com/pibgw/pibgw/sa/satest"
	"github.com/pibgw/pibgw/wire"
)

// syncBuf is a log sink the agent's goroutines write to while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSAMulticastLIDExhaustion is issue 43 item 8 at the SA: send-only joins that create
// groups (IPoIB's for every unresolved IPv6 neighbour) stop at MaxSendOnlyGroups, so a
// full member can still create a group; when the multicast LIDs do run out, the refusal
// (NO_RESOURCES) is counted and logged, once for the burst.
func TestSAMulticastLIDExhaustion(t *testing.T) {
	s := newSAFabric(t, satest.OneSwitch(t, 2, satest.Options{}), sa.Config{}, sa.ClientOptions{})
	s.agent.Close()
	var logs syncBuf
	agent, err := sa.StartSA(s.sm, sa.AgentConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	ctx := saCtx(t)
	c := s.clients[1]
	mgid := func(kind byte, i int) wire.GID {
		return wire.GID{0xff, 0x12, 0x60, 0x1b, 12: kind, 14: byte(i >> 8), 15: byte(i)}
	}
	params := sa.JoinParams{Create: true, QKey: 0x0B1B}
	n := 0
	for ; n < 2000; n++ {
		_, err := c.Join(ctx, mgid(1, n), sa.JoinSendOnlyFull, params)
		if sa.IsStatus(err, wire.SAStatusNoResources) {
			break
		}
		if err != nil {
			t.Fatalf("send-only join %d: %v", n, err)
		}
	}
	if n != sa.DefaultMaxSendOnlyGroups {
		t.Fatalf("%d send-only groups created, want the bound %d", n, sa.DefaultMaxSendOnlyGroups)
	}
	if st := agent.MulticastStats(); st.SendOnlyRefused != 1 || st.SendOnlyGroups != n {
		t.Fatalf("stats after the send-only flood: %+v", st)
	}
	// A full member still creates its group.
	if _, err := c.Join(ctx, mgid(2, 0), sa.JoinFull, params); err != nil {
		t.Fatalf("full-member join after the send-only flood: %v", err)
	}
	// Full members take the rest of the MLIDs; the first refused join is counted and
	// logged, the following ones counted.
	full := 1
	for ; full < 2000; full++ {
		_, err := c.Join(ctx, mgid(2, full), sa.JoinFull, params)
		if sa.IsStatus(err, wire.SAStatusNoResources) {
			break
		}
		if err != nil {
			t.Fatalf("full join %d: %v", full, err)
		}
	}
	if full == 2000 {
		t.Fatal("the multicast LIDs never ran out")
	}
	for i := range 5 {
		if _, err := c.Join(ctx, mgid(3, i), sa.JoinFull, params); !sa.IsStatus(err, wire.SAStatusNoResources) {
			t.Fatalf("join with no MLID left: %v", err)
		}
	}
	st := agent.MulticastStats()
	if st.MLIDExhausted != 6 {
		t.Fatalf("MLIDExhausted %d, want 6: %+v", st.MLIDExhausted, st)
	}
	if got := strings.Count(logs.String(), "join refused: no free multicast LID"); got != 1 {
		t.Fatalf("%d log lines about the exhaustion, want 1 (rate-limited):\n%s", got, logs.String())
	}
	// Leaving frees an MLID for the next group.
	if err := c.Leave(ctx, mgid(1, 0), sa.JoinSendOnlyFull); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Join(ctx, mgid(3, 0), sa.JoinFull, params); err != nil {
		t.Fatalf("join after a leave freed an MLID: %v", err)
	}
}
