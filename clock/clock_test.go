package clock

import (
	"testing"
	"time"
)

func TestFakeRunsTimersInOrder(t *testing.T) {
	c := NewFake(time.Unix(0, 0))
	var got []int
	c.AfterFunc(3*time.Second, func() { got = append(got, 3) })
	c.AfterFunc(1*time.Second, func() { got = append(got, 1) })
	t2 := c.AfterFunc(2*time.Second, func() { got = append(got, 2) })
	stopped := c.AfterFunc(time.Second, func() { got = append(got, -1) })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	c.Advance(1500 * time.Millisecond)
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("after 1.5s got %v, want [1]", got)
	}
	t2.Reset(2 * time.Second) // now due at 3.5s
	c.Advance(2 * time.Second)
	if len(got) != 3 || got[1] != 3 || got[2] != 2 {
		t.Fatalf("after 3.5s got %v, want [1 3 2]", got)
	}
	if c.Pending() != 0 {
		t.Fatalf("Pending = %d, want 0", c.Pending())
	}
	if want := time.Unix(3, 500e6); !c.Now().Equal(want) {
		t.Fatalf("Now = %v, want %v", c.Now(), want)
	}
}

func TestFakeTimerArmedFromCallback(t *testing.T) {
	c := NewFake(time.Unix(0, 0))
	n := 0
	var tick func()
	tick = func() {
		n++
		if n < 5 {
			c.AfterFunc(time.Second, tick)
		}
	}
	c.AfterFunc(time.Second, tick)
	c.Advance(10 * time.Second)
	if n != 5 {
		t.Fatalf("periodic timer fired %d times, want 5", n)
	}
}
