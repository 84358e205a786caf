package reducer_test

import (
	"testing"

	"gpuprof/profile/proftest"
	"gpuprof/reducer"
)

// A fetch bounded below the size of a message never gets it: the server
// ends such a fetch with a 409 instead of delivering. With PullBytes far
// below the batches' and partials' sizes the tree must still finish,
// because a node raises its bound to the server's max payload (a tree of
// large partials under an 8 MiB max payload and the 4 MiB default hung so).
func TestPullBytesBelowMessageSize(t *testing.T) {
	e := startBroker(t)
	c := connect(t, e, "reducer")
	const job = "pullbytes"
	ensureStream(t, c, job)
	items := jobItems(job, 5, proftest.Small, 8, 2)
	want := flatMerge(t, job, items)
	log, _ := newLogger(t)
	cfg := treeConfig(t, c, job, 8, 4, log)
	cfg.PullBytes = 256 // smaller than any batch or partial
	ready := make(chan reducer.NodeName, 16)
	cfg.OnReady = func(n reducer.NodeName) { ready <- n }
	pc, _, ec := runTree(t, cfg)
	for range cfg.Tree.Nodes() {
		<-ready
	}
	publishRanks(t, e, job, items, 16)
	if err := <-ec; err != nil {
		t.Fatal(err)
	}
	sameProfile(t, <-pc, want)
}
