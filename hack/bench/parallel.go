package main

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// inParallel calls do(i) for every i below count, workers at a time, and
// returns the first error (the calls not yet started then are not made).
func inParallel(count, workers int, do func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var failed error
	for i := 0; i < count && failed == nil; i++ {
		select {
		case work <- i:
		case failed = <-errs:
		}
	}
	close(work)
	wg.Wait()
	if failed == nil && len(errs) > 0 {
		failed = <-errs
	}
	return failed
}

// lastOfConfigMaps reads watcher until want distinct ConfigMaps have been
// seen in a state that match accepts, and returns when the last of them
// arrived. It fails when the watch ends first.
func lastOfConfigMaps(watcher watch.Interface, want int, match func(*corev1.ConfigMap) bool) (time.Time, error) {
	seen := map[string]bool{}
	var last time.Time
	for len(seen) < want {
		ev, ok := <-watcher.ResultChan()
		if !ok {
			return time.Time{}, fmt.Errorf("%d of %d objects seen before the watch ended", len(seen), want)
		}
		if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && match(cm) && !seen[cm.Name] {
			seen[cm.Name] = true
			last = time.Now()
		}
	}
	return last, nil
}
