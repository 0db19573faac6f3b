package git

// TreesWalked is how many commits' trees the cache has walked.
func (c *Cache) TreesWalked() int64 { return c.walks.Load() }

// RepositoriesOpened is how many times the cache has opened a repository.
func (c *Cache) RepositoriesOpened() int64 { return c.handles.opened.Load() }
