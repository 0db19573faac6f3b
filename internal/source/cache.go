package source

import (
	"container/list"
	"sync"
	"time"

	"github.com/plumb-dev/plumb/internal/source/render"
)

// cachedRender is a render, or the lasting error it failed with.
type cachedRender struct {
	engine    render.Engine
	objects   []*Object
	leftOut   []render.LeftOut
	committed time.Time // the commit's committer date (zero if unknown)
	err       error
}

// renderCache keeps the most recently used renders within a byte budget
// (an estimate of the memory their objects take). It is safe for
// concurrent use.
type renderCache struct {
	mu    sync.Mutex
	max   int64
	used  int64
	order *list.List               // most recently used first; values are *renderEntry
	byKey map[string]*list.Element // guarded by mu
}

type renderEntry struct {
	key    string
	size   int64
	render *cachedRender
}

func newRenderCache(maxBytes int64) *renderCache {
	return &renderCache{max: maxBytes, order: list.New(), byKey: map[string]*list.Element{}}
}

func (c *renderCache) get(key string) (*cachedRender, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*renderEntry).render, true
}

// add keeps r under key, evicting the least recently used renders until the
// budget holds. A render larger than the whole budget is not kept.
func (c *renderCache) add(key string, r *cachedRender) {
	size := sizeOfRender(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.used -= e.Value.(*renderEntry).size
		c.order.Remove(e)
		delete(c.byKey, key)
	}
	if size > c.max {
		return
	}
	for c.used+size > c.max {
		oldest := c.order.Back()
		entry := oldest.Value.(*renderEntry)
		c.order.Remove(oldest)
		delete(c.byKey, entry.key)
		c.used -= entry.size
	}
	c.byKey[key] = c.order.PushFront(&renderEntry{key: key, size: size, render: r})
	c.used += size
}

// bytesUsed is the estimated size of what the cache holds.
func (c *renderCache) bytesUsed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// sizeOfRender estimates the memory a render takes.
func sizeOfRender(r *cachedRender) int64 {
	size := int64(256) // the entry and its key
	if r.err != nil {
		size += int64(len(r.err.Error()))
	}
	for _, o := range r.objects {
		size += 160 + int64(len(o.Source.File)+len(o.name)+len(o.namespace)+len(o.data))
	}
	return size
}
