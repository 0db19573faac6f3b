package reconcile

import "fmt"

// The helpers below shape the messages a tick writes (conditions, Events,
// logs).

// maxListed bounds how many objects a message or the drift summary names.
const maxListed = 20

// cutList cuts a list of what a message names to maxListed items, the
// last saying how many more there are.
func cutList(items []string) []string {
	if len(items) <= maxListed {
		return items
	}
	return append(items[:maxListed:maxListed], fmt.Sprintf("and %d more", len(items)-maxListed))
}

// appendOnce appends s to list unless it is there already.
func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// truncate cuts s to max bytes, ending in "..." when it was cut.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max-3] + "..."
}
