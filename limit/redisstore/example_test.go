package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// Each node builds its limiter on a Store of its own; all nodes share the
// Redis and the Prefix.
func Example() {
	client, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New[string](redisstore.Config{Client: client, NodeShare: 0.5}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after the limiter: removes this node's counts
	l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: 64}, Store: store})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	p, err := l.Acquire(context.Background(), "203.0.113.7")
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	defer p.Release()
	// ... serve the client ...
}
