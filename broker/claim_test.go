package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gpuprof/broker"
	"gpuprof/profile"
)

// Of N ranks claiming one module object at once, exactly one wins; the
// others wait and get what it stores. A failed claimant releases them at
// once, a dead one (never settling) after their own bound.
func TestClaimModule(t *testing.T) {
	e := start(t, broker.EmbeddedOptions{})
	const n = 8
	conns := make([]*broker.Conn, n)
	for i := range conns {
		conns[i] = conn(t, e.Options(fmt.Sprintf("rank %d", i)))
	}
	h := profile.ModuleHash(0x1234)
	listing := []byte("the listing")

	var wg sync.WaitGroup
	won := make([]bool, n)
	errs := make([]error, n)
	got := make([][]byte, n)
	start := make(chan struct{})
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c := conns[i]
			won[i], errs[i] = c.ClaimModule(ctx(t), "claims", h, broker.ModuleSASS, fmt.Sprintf("rank %d", i))
			if errs[i] != nil {
				return
			}
			if won[i] {
				time.Sleep(100 * time.Millisecond) // the others are waiting by now
				if _, err := c.PutModule(ctx(t), "claims", h, broker.ModuleSASS, listing); err != nil {
					errs[i] = err
					return
				}
				errs[i] = c.SettleModule(ctx(t), "claims", h, broker.ModuleSASS, "")
				got[i] = listing
				return
			}
			wctx, cancel := context.WithTimeout(ctx(t), 10*time.Second)
			defer cancel()
			got[i], errs[i] = c.AwaitModule(wctx, "claims", h, broker.ModuleSASS)
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range conns {
		if errs[i] != nil {
			t.Fatalf("rank %d: %v", i, errs[i])
		}
		if won[i] {
			winners++
		}
		if string(got[i]) != string(listing) {
			t.Errorf("rank %d got %q", i, got[i])
		}
	}
	if winners != 1 {
		t.Fatalf("%d ranks won the claim, want 1", winners)
	}
	// A retried claim by the winner after settling is not a second win.
	again, err := conns[0].ClaimModule(ctx(t), "claims", h, broker.ModuleSASS, "rank 0")
	if err != nil || again {
		t.Fatalf("claim after settle: %v %v", again, err)
	}

	// Nobody claimed: no waiting.
	if _, err := conns[1].AwaitModule(ctx(t), "claims", h+1, broker.ModuleSASS); !errors.Is(err, broker.ErrModuleNotClaimed) {
		t.Fatalf("unclaimed: %v", err)
	}
	// The claimant failed: waiters stop at once, with its reason.
	if ok, err := conns[0].ClaimModule(ctx(t), "claims", h+2, broker.ModuleSASS, "rank 0"); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		conns[0].SettleModule(ctx(t), "claims", h+2, broker.ModuleSASS, "nvdisasm: exit status 1")
	}()
	t0 := time.Now()
	_, err = conns[1].AwaitModule(ctx(t), "claims", h+2, broker.ModuleSASS)
	if !errors.Is(err, broker.ErrModuleAbandoned) || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("abandoned: %v", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("waited %v for a failed claimant", d)
	}
	// The claimant died: the waiter's bound ends the wait.
	if ok, err := conns[0].ClaimModule(ctx(t), "claims", h+3, broker.ModuleSASS, "rank 0"); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	wctx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer cancel()
	if _, err := conns[1].AwaitModule(wctx, "claims", h+3, broker.ModuleSASS); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dead claimant: %v", err)
	}
	// Claims live in the module bucket's stream: deleting the job removes them.
	if err := conns[0].DeleteJob(ctx(t), "claims"); err != nil {
		t.Fatal(err)
	}
	fresh := conn(t, e.Options("rank 9"))
	if ok, err := fresh.ClaimModule(ctx(t), "claims", h, broker.ModuleSASS, "rank 9"); !ok || err != nil {
		t.Fatalf("claim in a fresh bucket: %v %v", ok, err)
	}
}
