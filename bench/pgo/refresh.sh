#!/usr/bin/env bash
# Refreshes cmd/portcullis/release.pgo, the CPU profile the daemon's release
# builds give `go build -pgo=` for profile-guided optimization (inlining and
# devirtualization of the calls the profile shows hot). It is not named
# default.pgo on purpose: Go would then apply it to every build and test of
# the main package too, recompiling every dependency for `go run` and
# `go test ./...` (minutes on a cold machine) for a gain of a few percent.
#
# Usage: bench/pgo/refresh.sh [--requests N]
#
# The profile is what the daemon does in BenchmarkDaemon (internal/daemon):
# keep-alive HTTP/1.1 requests proxied with every limit on: the lean path
# with the access log off and on, and the lean path on event loops
# (http1_server: eventloop) over plain TCP and over TLS 1.3 (eventloop-tls:
# the https listener, whose HTTP/1.1 the loops serve after the handshake),
# each daemon in a child process on loopback. Run it on a
# quiet machine after a change to the data path, then compare the daemon
# built with and without the new profile (see docs/performance.md, "Profile-
# guided optimization"). Traffic goes to 127.0.0.1 only; every process it
# starts is a child of the benchmark, which stops them when it ends.
set -euo pipefail

REQUESTS=600000
while (($#)); do
	case $1 in
	--requests) REQUESTS=$2; shift ;;
	*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Built without a profile, so that the new profile does not describe code
# the old one shaped.
(cd "$REPO" && go test -c -pgo=off -o "$work/daemon.test" ./internal/daemon)
(cd "$work" && PORTCULLIS_BENCH_CPUPROFILE="$work/cpu" PORTCULLIS_BENCH_DAEMONS="lean lean-log eventloop eventloop-tls" \
	./daemon.test -test.run XXX -test.bench 'Daemon$' -test.benchtime "${REQUESTS}x" -test.count 1)
go tool pprof -proto "$work/cpu.lean" "$work/cpu.lean-log" "$work/cpu.eventloop" "$work/cpu.eventloop-tls" > "$work/release.pgo"
mv "$work/release.pgo" "$REPO/cmd/portcullis/release.pgo"
echo "wrote cmd/portcullis/release.pgo ($(du -h "$REPO/cmd/portcullis/release.pgo" | cut -f1))"
