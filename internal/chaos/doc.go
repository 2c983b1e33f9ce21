// Package chaos holds the chaos tests of the portcullis daemon and no code
// of its own. TestChaos starts the daemon (internal/daemon) in front of
// three backends and drives it, for a bounded time, with random abusive
// clients from many loopback source addresses while legitimate clients
// keep making requests. It then checks that the legitimate clients were
// served throughout, that every count came back to zero and that no
// goroutine was left behind. TestChaosStopUnderAttack stops the daemon in
// the middle of such an attack. bugs_test.go holds minimal reproductions of
// the bugs these tests found in other packages.
//
// Run TestChaos longer or harder, or replay a failure by its seed:
//
//	go test -race ./internal/chaos -run '^TestChaos$' -chaos.duration=5m
//	go test -race ./internal/chaos -run '^TestChaos$' -chaos.attackers=64
//	go test -race ./internal/chaos -run '^TestChaos$' -chaos.seed=12345
//
// The package comes before the -chaos flags: go test stops reading its
// package list at the first flag it does not know.
//
// See docs/chaos.md for what the tests do and what they assert.
package chaos
