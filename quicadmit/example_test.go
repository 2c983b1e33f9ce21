package quicadmit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/quicadmit"
)

// A Controller attached to a transport: attach before listening, and
// accept through the Controller's Listener so that it sees completions.
func ExampleController_Listen() {
	ctrl, err := quicadmit.New(quicadmit.Config{}) // Retry past 256..4096 in progress, refuse at 16384
	if err != nil {
		panic(err)
	}
	defer ctrl.Close()
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		panic(err)
	}
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	serverTLS, clientTLS := quicadmit.DemoTLS() // a self-signed certificate
	ln, err := ctrl.Listen(tr, serverTLS, nil)
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			if _, err := ln.Accept(context.Background()); err != nil {
				return
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, ln.Addr().String(), clientTLS, nil)
	if err != nil {
		panic(err)
	}
	defer conn.CloseWithError(0, "")
	for i := 0; i < 500 && ctrl.Snapshot().Completed == 0; i++ {
		time.Sleep(10 * time.Millisecond) // the server completes after the client
	}
	s := ctrl.Snapshot()
	fmt.Printf("admitted %d, completed %d, in progress %d, Retry on %v\n", s.Admitted, s.Completed, s.InProgress, s.RetryOn)
	// Output: admitted 1, completed 1, in progress 0, Retry on false
}

// Literal zeros need quicadmit.Zero, since a zero field selects the
// default. This Controller sends every client without a token a Retry.
func ExampleZero() {
	ctrl, err := quicadmit.New(quicadmit.Config{
		RetryThresholdMin: quicadmit.Zero,
		RetryThresholdMax: quicadmit.Zero,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(ctrl.VerifySourceAddress(&net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 443}))
	// Output: true
}
