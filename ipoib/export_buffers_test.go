package ipoib

// PostedReceives is how many receive buffers the interface has made and posted.
func (i *Interface) PostedReceives() int {
	i.rxp.mu.Lock()
	defer i.rxp.mu.Unlock()
	return i.rxp.ring.posted
}

// ControlSlots is how many control send slots the interface has made.
func (i *Interface) ControlSlots() int {
	i.txp.snd.mu.Lock()
	defer i.txp.snd.mu.Unlock()
	return len(i.txp.snd.mrs) * ctrlChunk
}
