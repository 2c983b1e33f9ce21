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
