package v1alpha1

// The status lists are bounded (a few dozen entries) while their counts are
// exact; the methods below say how many a list leaves out, so that every
// view that writes "and N more" counts alike.

// Unlisted is how many drifted objects Objects leaves out.
func (d *DriftSummary) Unlisted() int {
	if d == nil {
		return 0
	}
	return max(int(d.Count)-len(d.Objects), 0)
}

// NotCurrent counts the objects that are not Current.
func (h *HealthStatus) NotCurrent() int {
	if h == nil {
		return 0
	}
	return int(h.InProgress + h.Failed + h.Terminating + h.NotFound + h.Unknown)
}

// Unlisted is how many objects that are not Current Unhealthy leaves out.
func (h *HealthStatus) Unlisted() int {
	if h == nil {
		return 0
	}
	return max(h.NotCurrent()-len(h.Unhealthy), 0)
}

// Changed counts the objects the change set created, configured or
// deleted.
func (cs *ChangeSet) Changed() int {
	if cs == nil {
		return 0
	}
	return int(cs.Created + cs.Configured + cs.Deleted)
}

// Unlisted is how many changed objects Entries leaves out.
func (cs *ChangeSet) Unlisted() int {
	if cs == nil {
		return 0
	}
	return max(cs.Changed()-len(cs.Entries), 0)
}
