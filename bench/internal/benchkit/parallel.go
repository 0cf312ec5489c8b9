package benchkit

import (
	"errors"
	"runtime"
	"sync"
)

// Parallel calls f(0) … f(n-1) on every CPU, each worker stopping at its
// first error, and returns the errors joined.
func Parallel(n int, f func(i int) error) error {
	errs := make([]error, runtime.NumCPU())
	var wg sync.WaitGroup
	for w := range len(errs) {
		wg.Go(func() {
			for i := w; i < n; i += len(errs) {
				if err := f(i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
