package git

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-billy/v5/osfs"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"k8s.io/utils/lru"
)

// Opening a cached repository decodes its pack indexes, which for a
// repository of thousands of objects costs milliseconds: far more than
// reading the few files a render needs. So the cache keeps repositories
// open (openHandles of them), one handle per folder shared by every read of
// that folder. go-git's storage is not safe for concurrent use: a handle's
// reads take its lock one object at a time. A handle sees the packs that
// existed when it was opened; a fetch that adds one makes the folder's
// handle stale (generation), and the next read opens a new one. Readers
// that hold the old handle still read what it had: fetches only add packs.

// openHandles is how many repositories stay open. Each keeps its pack
// indexes decoded, about 30 bytes per object in the repository's history.
const openHandles = 8

// handleCacheBytes bounds the decoded objects a handle keeps (go-git's own
// default, 96 MiB, would grow with every blob read by a long-lived handle);
// renders are cached, so objects are rarely read twice.
const handleCacheBytes = 256 << 10

// repoHandle is an open repository and the lock its reads take.
type repoHandle struct {
	mu         sync.Mutex
	repo       *gogit.Repository
	generation uint64 // of its folder when it was opened
}

// handles are the open repositories, by folder.
type handles struct {
	open *lru.Cache // folder → *repoHandle

	mu          sync.Mutex
	generations map[string]uint64 // folder → fetches that added packs; guarded by mu
	opened      atomic.Int64      // repositories opened (for tests)
}

func newHandles() *handles {
	return &handles{open: lru.New(openHandles), generations: map[string]uint64{}}
}

func (h *handles) generation(dir string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.generations[dir]
}

// get returns the folder's open repository, opening it when none is open
// or the open one predates the folder's last fetch.
func (h *handles) get(dir string) (*repoHandle, error) {
	generation := h.generation(dir)
	if v, ok := h.open.Get(dir); ok {
		if handle := v.(*repoHandle); handle.generation == generation {
			return handle, nil
		}
	}
	repo, err := openBounded(dir)
	if err != nil {
		return nil, err
	}
	h.opened.Add(1)
	handle := &repoHandle{repo: repo, generation: generation}
	h.open.Add(dir, handle)
	return handle, nil
}

// openBounded opens the repository in dir with an object cache of
// handleCacheBytes.
func openBounded(dir string) (*gogit.Repository, error) {
	storage := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(handleCacheBytes), filesystem.Options{})
	repo, err := gogit.Open(storage, nil)
	if err != nil {
		return nil, fmt.Errorf("opening the cached repository %s: %w", dir, err)
	}
	return repo, nil
}

// fetched records that a fetch added to the folder: its open handle is
// stale.
func (h *handles) fetched(dir string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.generations[dir]++
	h.open.Remove(dir)
}

// with runs f with the handle's repository, under its lock.
func (r *repoHandle) with(f func(*gogit.Repository) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f(r.repo)
}
