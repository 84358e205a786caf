package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"gpuprof/reducer"
)

// runNodes runs the named nodes of a tree in this process and waits for
// all of them. Failures are gathered without bound (a node never blocks on
// reporting its error, however many fail) and returned as one error that
// names every failed node, in tree order.
func runNodes(ctx context.Context, cfg reducer.Config, names []reducer.NodeName) error {
	type failure struct {
		name reducer.NodeName
		err  error
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fails []failure
	)
	for _, name := range names {
		c := cfg
		c.Node = name
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := reducer.RunNode(ctx, c); err != nil {
				mu.Lock()
				fails = append(fails, failure{name, err})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(fails) == 0 {
		return nil
	}
	sort.Slice(fails, func(i, j int) bool {
		a, b := fails[i].name, fails[j].name
		return a.Level < b.Level || a.Level == b.Level && a.Index < b.Index
	})
	named := make([]string, len(fails))
	errs := make([]error, len(fails))
	for i, f := range fails {
		named[i] = f.name.String()
		errs[i] = fmt.Errorf("node %s: %w", f.name, f.err)
	}
	return fmt.Errorf("%d of %d reducer nodes failed (%s):\n%w", len(fails), len(names), strings.Join(named, ", "), errors.Join(errs...))
}

// parseNodes reads --node's comma-separated list.
func parseNodes(list string) ([]reducer.NodeName, error) {
	var names []reducer.NodeName
	for _, s := range strings.Split(list, ",") {
		name, err := reducer.ParseNodeName(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}
