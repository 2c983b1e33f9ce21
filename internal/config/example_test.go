package config_test

import (
	"errors"
	"fmt"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

func ExampleParse() {
	_, err := config.Parse("portcullis.yaml", []byte(`listeners:
  - protocol: http
    listen: 127.0.0.1:8080
    routes:
      - path_prefix: /api
        upstreams: [http://127.0.0.1:9000]
        limit: {permits: -3, status: 200}
`))
	fmt.Println(err)
	fmt.Println(errors.Is(err, config.ErrInvalid))
	// Output:
	// portcullis.yaml:7:26: listeners[0].routes[0].limit.permits: must be -1 (unlimited) or more (got -3)
	// portcullis.yaml:7:38: listeners[0].routes[0].limit.status: must be from 400 to 599 (got 200)
	// true
}

func ExampleConfig_Effective() {
	c, err := config.Parse("portcullis.yaml", []byte(`listeners:
  - protocol: http
    listen: 127.0.0.1:8080
    routes:
      - upstreams: [http://127.0.0.1:9000]
        limit: {key: host}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	e := c.Effective()
	l := e.Listeners[0]
	lim := l.Routes[0].Limit
	fmt.Println(l.Name, l.MaxConnsPerClient, l.IPv6Prefix, l.ReadHeaderTimeout)
	fmt.Println(lim.Key, lim.Permits, lim.Status, lim.RetryAfter)
	fmt.Println(c.Listeners[0].Name == "") // the parsed Config keeps its zero values
	// Output:
	// http-0 64 64 10s
	// host 64 429 1s
	// true
}
