package ipoib

// PostedReceives is how many receive buffers the interface has made and posted.
func (i *Interface) PostedReceives() int {
	i.rxp.mu.Lock()
	defer i.rxp.mu.Unlock()
	return i.rxp.ring.posted
}
