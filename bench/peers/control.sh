#!/usr/bin/env bash
# Control for the attack runs of run.sh: is the legitimate goodput lost under
# attack the proxy's doing, or the cost of the attacker itself on the cores
# it shares with everything else on this machine?
#
# Usage: bench/peers/control.sh [--scenario slowloris|slow-requests] [--rounds N]
#
# Two identical Portcullis daemons (--syn-filter, 64 connections per client)
# run in front of one backend. 18 legitimate clients always use the first.
# Each round measures 10 s of their goodput three times: with no attacker,
# with the attacker (a separate siege process, 3000 connections, 5000
# attempts/s) aimed at the twin, which the legitimate clients never use, and
# with the same attacker aimed at their own proxy. If the second ratio is as
# low as the third, the loss comes from the attacker's presence on the
# machine, not from how the proxy handles it. Traffic goes to 127.0.0.1 only;
# every process is stopped by its PID. About 2 minutes for 3 rounds.
set -euo pipefail

SCENARIO=slowloris
ROUNDS=3
while (($#)); do
	case $1 in
	--scenario) SCENARIO=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	-h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "control.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TMP=$(mktemp -d /tmp/portcullis-control.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

(cd "$REPO" && go build -pgo=cmd/portcullis/release.pgo -o "$TMP/portcullis" ./cmd/portcullis && go build -o "$TMP/backend" ./bench/peers/backend)
P=$TMP/portcullis
"$TMP/backend" -listen 127.0.0.1:18680 >/dev/null 2>&1 & PIDS+=($!)
"$P" run --listen 127.0.0.1:18681 --upstream http://127.0.0.1:18680 --max-conns-per-client 64 --syn-filter >/dev/null 2>&1 & PIDS+=($!)
"$P" run --listen 127.0.0.1:18682 --upstream http://127.0.0.1:18680 --max-conns-per-client 64 --syn-filter >/dev/null 2>&1 & PIDS+=($!)
sleep 1

legit() {
	"$P" siege -json -scenario none -clients 18 -client-addr 127.0.0.3 -connections fresh -duration 10s \
		http://127.0.0.1:18681/ | jq -r '.legit.goodput_per_s | floor'
}
# attack PORT: the attacker alone for 16 s, from 3 s before the legitimate
# window to 3 s after it.
attack() {
	"$P" siege -json -scenario "$SCENARIO" -clients 1 -client-addr 127.0.0.40 -connections fresh \
		-attack-conns 3000 -max-connect-rate 5000 -duration 16s "http://127.0.0.1:$1/" >/dev/null 2>&1 &
	APID=$!
	PIDS+=("$APID")
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

echo "scenario $SCENARIO; legitimate goodput per 10 s window, and its ratio to the no-attack window"
for r in $(seq "$ROUNDS"); do
	base=$(legit)
	attack 18682; sleep 3; twin=$(legit); wait "$APID" || true
	attack 18681; sleep 3; same=$(legit); wait "$APID" || true
	echo "round $r: no attack $base/s; attacker at the twin $twin/s ($(ratio "$twin" "$base")); attacker at this proxy $same/s ($(ratio "$same" "$base"))"
done
