//go:build e2e

/*
Copyright 2026 The fence-attacher Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package e2e

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
)

// watchFunc is a cache.WatcherWithContext.
type watchFunc func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)

func (f watchFunc) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return f(ctx, o)
}

// followWatch hands every event of w from resource version rv on to handle,
// in order, on a goroutine that done counts, until ctx ends. A
// RetryWatcher, so that a watch the apiserver closes resumes where it was:
// a test's timeline must not miss the write it is about.
func followWatch(ctx context.Context, done *sync.WaitGroup, rv string, w watchFunc, handle func(watch.Event)) error {
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, w)
	if err != nil {
		return err
	}
	done.Add(1)
	go func() {
		defer done.Done()
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				if !ok {
					return
				}
				handle(ev)
			}
		}
	}()
	return nil
}
