package trace

import "context"

// Follow records events (Enable) and hands fn, in batches, those recorded from sequence
// number from on (0: from now on) that pass f, as Records of owner/pid, until ctx ends (then it hands over what was
// recorded until then, and returns) or fn fails. Events overwritten before Follow read
// them (it fell RingSize behind) come as one record with Lost set.
func Follow(ctx context.Context, from uint64, f Filter, owner string, pid int, fn func([]Record) error) error {
	disable := Enable()
	defer disable()
	bell, unsubscribe := Subscribe()
	defer unsubscribe()
	if from == 0 {
		from = Next()
	}
	buf := make([]Event, 256)
	final := false
	for {
		n, next, lost := Read(from, buf)
		from = next
		var recs []Record
		if lost > 0 {
			recs = append(recs, LostRecord(owner, pid, lost))
		}
		for i := range buf[:n] {
			if f.Match(&buf[i]) {
				recs = append(recs, buf[i].ToRecord(owner, pid))
			}
		}
		if len(recs) > 0 {
			if err := fn(recs); err != nil {
				return err
			}
		}
		if n == len(buf) {
			continue
		}
		if final {
			return ctx.Err()
		}
		select {
		case <-bell:
		case <-ctx.Done():
			final = true // one more pass: what was recorded until now
		}
	}
}
