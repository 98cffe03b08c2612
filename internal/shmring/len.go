package shmring

// Indexes returns the ring's two shared indexes: tail, the bytes the consumer ever
// released, and head, the bytes the producer ever published. The ring is empty when they
// are equal; head only grows. Tail is read first, so equal values mean the ring was empty
// when head was read. Either side may call Indexes, from any goroutine; after Close both
// are 0.
func (r *Ring) Indexes() (tail, head uint64) {
	if !r.enter() {
		return 0, 0
	}
	defer r.exit()
	tail = r.tail.Load()
	head = r.head.Load()
	return tail, head
}
