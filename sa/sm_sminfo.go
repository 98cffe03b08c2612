package sa

// SMInfo (IBA 14.2.5.13): what this SM answers about itself.

func (sm *SM) registerSMInfo()   {}
func (sm *SM) unregisterSMInfo() {}
