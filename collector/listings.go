package collector

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"gpuprof/broker"
	"gpuprof/collector/online"
	"gpuprof/profile"
)

// ModuleBucket is what sharing listings needs of the broker: a job's
// module bucket and its claims (a *broker.Conn). An interface, so that the
// collector holds no connection it could use for anything else.
type ModuleBucket interface {
	ClaimModule(ctx context.Context, job string, h profile.ModuleHash, kind, owner string) (bool, error)
	PutModule(ctx context.Context, job string, h profile.ModuleHash, kind string, data []byte) (bool, error)
	SettleModule(ctx context.Context, job string, h profile.ModuleHash, kind, failure string) error
	AwaitModule(ctx context.Context, job string, h profile.ModuleHash, kind string) ([]byte, error)
}

// brokerListings shares nvdisasm listings through a job's module bucket
// (online.ListingShare).
type brokerListings struct {
	conn       ModuleBucket
	job, owner string
}

// BrokerListings shares the nvdisasm listings of job's modules through
// conn, as rank.
func BrokerListings(conn ModuleBucket, job string, rank int32) online.ListingShare {
	host, _ := os.Hostname()
	var nonce [4]byte
	rand.Read(nonce[:])
	// Unique per process: a claim retried after a lost acknowledgement
	// recognises itself by it.
	owner := fmt.Sprintf("rank %d pid %d on %s #%x", rank, os.Getpid(), host, nonce)
	return &brokerListings{conn: conn, job: job, owner: owner}
}

func (b *brokerListings) Claim(ctx context.Context, h profile.ModuleHash, fn string) (bool, error) {
	return b.conn.ClaimModule(ctx, b.job, h, broker.FunctionKind(fn), b.owner)
}

func (b *brokerListings) Store(ctx context.Context, h profile.ModuleHash, fn string, listing []byte, failure string) error {
	var perr error
	kind := broker.FunctionKind(fn)
	if failure == "" {
		if _, perr = b.conn.PutModule(ctx, b.job, h, kind, listing); perr != nil {
			failure = "storing the listing: " + perr.Error()
		}
	}
	return errors.Join(perr, b.conn.SettleModule(ctx, b.job, h, kind, failure))
}

func (b *brokerListings) Await(ctx context.Context, h profile.ModuleHash, fn string) ([]byte, bool, error) {
	data, err := b.conn.AwaitModule(ctx, b.job, h, broker.FunctionKind(fn))
	if errors.Is(err, broker.ErrModuleNotClaimed) {
		return nil, false, nil
	}
	return data, true, err
}
