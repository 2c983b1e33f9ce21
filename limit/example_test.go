package limit_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/seed-a07d1050/portcullis/limit"
)

func Example() {
	l, err := limit.New(limit.Config[string]{
		Policy: limit.Policy[string]{
			Permits: 2,
			PermitsFor: func(user string) int {
				if user == "batch" {
					return 32
				}
				return 0 // the default above
			},
		},
	})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	a, _ := l.Acquire(context.Background(), "alice")
	b, _ := l.Acquire(context.Background(), "alice")
	_, err = l.TryAcquire("alice")
	fmt.Println(errors.Is(err, limit.ErrLimited))

	a.Release()
	b.Release()
	b.Release() // only the first release counts
	fmt.Println(l.InUse("alice"), l.Totals().Keys)
	// Output:
	// true
	// 0 0
}

// A two-tier admission: a fast path takes a permit only when one is free
// now and leaves no trace when there is none; the request it cannot take
// goes on to the full path, which refuses, queues or grants in shadow mode
// and counts that once.
func ExampleAcquireOptions_quiet() {
	l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: 1}})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()
	held, _ := l.TryAcquire("alice")

	// The fast path finds no free permit: refused, and nothing counted.
	_, err = l.AcquireWith(ctx, "alice", limit.AcquireOptions{Quiet: true})
	fmt.Println(errors.Is(err, limit.ErrLimited), l.Totals().Refused)
	// The full path asks again and counts the refusal once.
	_, err = l.TryAcquire("alice")
	fmt.Println(errors.Is(err, limit.ErrLimited), l.Totals().Refused)

	held.Release()
	p, err := l.AcquireWith(ctx, "alice", limit.AcquireOptions{Quiet: true})
	fmt.Println(err == nil, l.Totals().Granted) // a quiet grant counts as any other
	p.Release()
	// Output:
	// true 0
	// true 1
	// true 2
}
