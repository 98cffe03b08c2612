package ipoib

// ArmedNeighborTimers is how many neighbour entries have a timer armed (the timer heap).
func (i *Interface) ArmedNeighborTimers() int {
	i.nb.mu.RLock()
	defer i.nb.mu.RUnlock()
	return i.nb.timers.due.Len()
}
