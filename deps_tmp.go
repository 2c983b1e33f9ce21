//go:build tools

package tools

import (
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/quic-go/quic-go"
	_ "github.com/quic-go/quic-go/http3"
	_ "github.com/redis/go-redis/v9"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/net/http2"
	_ "golang.org/x/net/websocket"
	_ "golang.org/x/sync/semaphore"
	_ "golang.org/x/time/rate"
	_ "gonum.org/v1/plot"
)
