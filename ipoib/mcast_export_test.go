package ipoib

// MaxSendOnlyGroups is maxSendOnlyGroups, for tests.
const MaxSendOnlyGroups = maxSendOnlyGroups

// SendOnlyGroups counts the interface's send-only memberships, and its groups with a join
// or leave queued.
func (i *Interface) SendOnlyGroups() (joined, busy int) {
	i.mc.mu.RLock()
	defer i.mc.mu.RUnlock()
	for _, g := range i.mc.m {
		if g.sendOnly() {
			joined++
		}
		if g.busy {
			busy++
		}
	}
	return joined, busy
}
