package connlimit_test

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/seed-a07d1050/portcullis/connlimit"
)

// One client may hold two connections; its third is closed at once, and
// the server never sees it.
func ExampleNewListener() {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	l, err := connlimit.NewListener(inner, connlimit.Config{Policy: connlimit.Policy{Permits: 2}})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			key, _ := connlimit.KeyOf(c)
			fmt.Fprintf(c, "hello %s\n", key)
		}
	}()

	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range 3 {
		c, err := d.Dial("tcp", l.Addr().String())
		if err != nil {
			panic(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err == io.EOF {
			fmt.Println("refused")
			continue
		}
		fmt.Print(string(buf[:n]))
	}
	fmt.Println("client-cap refusals:", l.Stats().Refused.ClientCap)
	// Output:
	// hello 127.0.0.2
	// hello 127.0.0.2
	// refused
	// client-cap refusals: 1
}
