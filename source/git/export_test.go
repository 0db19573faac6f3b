package git

// TreesWalked is how many commits' trees the cache has walked.
func (c *Cache) TreesWalked() int64 { return c.walks.Load() }
