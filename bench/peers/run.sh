#!/usr/bin/env bash
# Peer comparison: the same siege scenarios against Portcullis, nginx and
# HAProxy, each on loopback in front of the same backend (2 ms per response).
#
# Usage: bench/peers/run.sh [--quick] [--rounds N] [--throughput-rounds N] [--duration D] [--warmup D]
#                           [--proxies "portcullis nginx haproxy"] [--no-profile]
#                           [--no-throughput] [--no-attacks] [--attack-rate R] [--out DIR]
#        bench/peers/run.sh --tls [--rounds N] [--duration D] [--tls-proxies L] [--no-profile] [--out DIR]
#
#   --quick       1 round of 3 s windows (about 3 minutes): a smoke test
#   --rounds N    interleaved rounds; the table shows medians (default 3)
#   --throughput-rounds N  rounds of the throughput scenario (default 5, or
#                 --rounds when that is given): the rounds beyond --rounds
#                 run the throughput scenario alone. Within each round
#                 nginx, portcullis, haproxy and portcullis-log run back to
#                 back, portcullis next to each peer, in that order in odd
#                 rounds and the reverse in even ones (the others, rotated,
#                 before or after them): the issue's throughput targets
#                 compare them round by round, and this machine's speed
#                 drifts by a tenth over a minute
#   --duration D  measured window of each run (default 10s)
#   --warmup D    attacker alone before each attack window (default 3s)
#   --proxies L   which proxies to run (default "portcullis portcullis-nethttp
#                 portcullis-log nginx haproxy floor floor-admit
#                 floor-epoll-admit"). portcullis is
#                 the daemon with every limit on and the access log off
#                 (bench/peers/portcullis.yaml: its own HTTP/1.1 server with
#                 the lean path on event loops of its own, the default,
#                 http1_server: eventloop);
#                 portcullis-nethttp the same with http1_server: net/http
#                 (portcullis-nethttp.yaml); portcullis-log the same as
#                 portcullis with the access log on (portcullis-log.yaml, lines
#                 to a file); portcullis-syn adds syn_filter, dropping an
#                 over-cap client's SYNs in the kernel (portcullis-syn.yaml);
#                 portcullis-rst refuses with RST (portcullis-rst.yaml); floor
#                 is bench/floor, the least a Go proxy does per request, and
#                 floor-admit bench/floor -admit, the floor plus the admission
#                 work a byte-level data path could not skip, and
#                 floor-epoll-admit bench/floor -admit -epoll, the same work
#                 on epoll loops of its own outside Go's poller (throughput
#                 scenario only, all three: references for the daemon's cost)
#   --no-profile  skip the pprof CPU profiles of Portcullis
#   --no-throughput  skip the throughput scenario (attacks only)
#   --no-attacks  skip the attack scenarios and their baseline (throughput only)
#   --attack-rate R  attacker connection attempts per second, reconnects
#                 included (siege -max-connect-rate; default 5000)
#   --legit-rate R   legitimate requests per second per client in the attack
#                 scenarios and their baseline (siege -rate; default 0: back
#                 to back)
#   --out DIR     where results.md, results.json, peers.png, the pprof
#                 profiles and their top lists go (default
#                 bench/results/run-MMDD-HHMM, UTC). To publish a run as the
#                 run of record, copy its results.md and peers.png into
#                 docs/benchmarks/ and its results.json and pprof-top*.txt
#                 into bench/results/; the .pprof files are not committed.
#   --tls         the TLS scenarios instead (nothing above runs): each proxy
#                 terminating TLS 1.3 with an ECDSA P-256 certificate in
#                 front of the same backend, a per-client cap that never
#                 refuses: https1, HTTPS/1.1 keep-alive (wrk, 2 threads, 64
#                 connections); h2, HTTP/2 (h2load, 16 connections x 16
#                 streams); hs-full and hs-resumed, one request per new
#                 connection (bench/peers/tlsconns, 16 workers from 16
#                 addresses), full handshakes and TLS 1.3 resumptions. Each
#                 round runs every scenario for every proxy, nginx-tls,
#                 portcullis-tls and haproxy-tls back to back (reversed in
#                 even rounds); the targets compare them round by round.
#                 Writes tls-results.md and tls-results.json, and (without
#                 --no-profile) pprof-top-tls-h2.txt and pprof-top-tls-https1.txt
#   --tls-scenarios L  which scenarios run (default "https1 h2 hs-full
#                 hs-resumed"), to give one more rounds than a whole run
#   --tls-proxies L  which of them run (default "portcullis-tls nginx-tls
#                 haproxy-tls tlsfloor tlsfloor-h2check tlsfloor-proxy
#                 nginx-static"): portcullis-tls is
#                 bench/peers/portcullis-tls.yaml, nginx-tls and haproxy-tls
#                 nginx-tls.conf and haproxy-tls.cfg; the references are
#                 bench/tlsfloor (net/http answering every request itself,
#                 no proxying), tlsfloor -h2check (the same with HTTP/2
#                 behind internal/h2check, as the daemon serves it),
#                 tlsfloor-proxy (tlsfloor -h2check proxying every request
#                 to the backend with the least a proxy does: no limit,
#                 route or log) and nginx-static (nginx-tls.conf's second
#                 server, answering itself)
#
# Needs root (it binds 127.0.0.2.. as source addresses and may apt-get
# install nginx-light and haproxy). It never starts or stops a system service:
# every process it starts runs in the foreground from a config under a temp
# directory, and is stopped by its PID when the script ends, however it ends.
# Traffic goes to 127.0.0.1 only. A full run of the ten default proxies
# (the three floors in the throughput scenario only) takes about 20 minutes;
# with --no-attacks, about 8. With --tls (it may also apt-get install wrk
# and nghttp2-client), 3 rounds of 8 s windows take about 15 minutes.
set -euo pipefail

ROUNDS=3
TROUNDS= # --throughput-rounds; empty: 5, or --rounds when given
DURATION=10s
WARMUP=3s
PROXIES="portcullis portcullis-nethttp portcullis-log nginx haproxy floor floor-admit floor-epoll-admit"
TLS=0
TLS_PROXIES="portcullis-tls nginx-tls haproxy-tls tlsfloor tlsfloor-h2check tlsfloor-proxy nginx-static"
PROFILE=1
THROUGHPUT=1
ATTACKS=1
ATTACK_RATE=5000
LEGIT_RATE=0
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=$REPO/bench/results/run-$(date -u +%m%d-%H%M)
CMDLINE="bench/peers/run.sh $*"

while (($#)); do
	case $1 in
	--quick) ROUNDS=1 TROUNDS=1 DURATION=3s WARMUP=1s ;;
	--rounds) ROUNDS=$2; shift; [[ -n $TROUNDS ]] || TROUNDS=$ROUNDS ;;
	--throughput-rounds) TROUNDS=$2; shift ;;
	--duration) DURATION=$2; shift ;;
	--warmup) WARMUP=$2; shift ;;
	--proxies) PROXIES=$2; shift ;;
	--no-profile) PROFILE=0 ;;
	--no-throughput) THROUGHPUT=0 PROFILE=0 ;;
	--no-attacks) ATTACKS=0 ;;
	--attack-rate) ATTACK_RATE=$2; shift ;;
	--legit-rate) LEGIT_RATE=$2; shift ;;
	--out) OUT=$2; shift ;;
	--tls) TLS=1 ;;
	--tls-proxies) TLS_PROXIES=$2; shift ;;
	--tls-scenarios) TLS_SCENARIOS=$2; shift ;;
	-h | --help) sed -n '2,88p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done
for p in $PROXIES; do
	case $p in portcullis | portcullis-nethttp | portcullis-log | portcullis-syn | portcullis-rst | nginx | haproxy | floor | floor-admit | floor-epoll-admit) ;;
	*) echo "run.sh: unknown proxy $p" >&2; exit 2 ;;
	esac
done
for p in $TLS_PROXIES; do
	case $p in portcullis-tls | nginx-tls | haproxy-tls | tlsfloor | tlsfloor-h2check | tlsfloor-proxy | nginx-static) ;;
	*) echo "run.sh: unknown TLS proxy $p" >&2; exit 2 ;;
	esac
done
TROUNDS=${TROUNDS:-5}
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "run.sh: --rounds must be 1..99" >&2; exit 2; }
[[ $TROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "run.sh: --throughput-rounds must be 1..99" >&2; exit 2; }
for d in "$DURATION" "$WARMUP"; do
	[[ $d =~ ^[1-9][0-9]{0,2}s$ ]] || { echo "run.sh: durations are whole seconds, 1s..999s (got $d)" >&2; exit 2; }
done
[[ $ATTACK_RATE =~ ^[1-9][0-9]{0,5}$ ]] || { echo "run.sh: --attack-rate must be a positive integer" >&2; exit 2; }

# Loopback ports; each is checked free before use.
HOST=127.0.0.1
BACKEND_PORT=18480
declare -A PORT=([portcullis]=18481 [nginx]=18482 [haproxy]=18483 [profiled]=18484 [portcullis-rst]=18486 [portcullis-syn]=18487
	[portcullis-nethttp]=18488 [portcullis-log]=18489 [floor]=18490 [floor-admit]=18491 [floor-epoll-admit]=18493
	[portcullis-tls]=18494 [nginx-tls]=18495 [haproxy-tls]=18496 [tlsfloor]=18497 [nginx-static]=18498 [tlsfloor-h2check]=18499
	[tlsfloor-proxy]=18500
	[direct]=$BACKEND_PORT)
PPROF_PORT=18485
ATTACK_CONNS=3000
LEGIT_CLIENTS=18 # fresh connections, one per address, in the attack scenarios
CAP=64 # max_conns_per_client of every proxy (the portcullis*.yaml files say it too)

TMP=$(mktemp -d /tmp/portcullis-peers.XXXXXX)
RAW=$TMP/raw
mkdir -p "$RAW" "$OUT"
declare -A PID=()
STARTED=()         # every PID this script started, stopped in reverse order
declare -A REAPED=() # PIDs already stopped and waited for: never signalled again

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# stop_pid sends SIGTERM, waits up to 10 s, then SIGKILL: only to a PID we started.
stop_pid() {
	local pid=$1 i
	[[ -z ${REAPED[$pid]:-} ]] || return 0
	REAPED[$pid]=1
	kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "pid $pid did not stop in 10 s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local i
	for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
		stop_pid "${STARTED[i]}"
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need_root() {
	if ((EUID != 0)); then
		echo "run.sh: run as root (source addresses 127.0.0.2.. and apt-get)" >&2
		exit 2
	fi
}

# install_peers installs nginx and HAProxy from Debian when missing, without
# letting the packages start their services.
install_peers() {
	local missing=()
	command -v nginx >/dev/null || missing+=(nginx-light)
	command -v haproxy >/dev/null || missing+=(haproxy)
	((${#missing[@]})) || return 0
	log "installing ${missing[*]} from Debian's packages"
	local policy=/usr/sbin/policy-rc.d made_policy=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		made_policy=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	((made_policy)) && rm -f "$policy"
	return 0
}

port_free() { ! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# wait_http waits up to 10 s for an HTTP answer at $1; $2, when given, is
# one more curl flag (-k for the TLS proxies' self-signed certificate).
wait_http() {
	local i
	for ((i = 0; i < 100; i++)); do
		curl -s ${2:-} -o /dev/null -m 1 "$1" && return 0
		sleep 0.1
	done
	echo "run.sh: nothing answered at $1 within 10 s" >&2
	return 1
}

# start NAME CMD...: start a foreground process, remember its PID.
start() {
	local name=$1
	shift
	"$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
	PID[$name]=$!
	STARTED+=("$!")
}

render() { # render TEMPLATE LISTEN > file
	sed -e "s|@TMP@|$TMP|g" -e "s|@LISTEN@|$2|g" -e "s|@BACKEND@|$HOST:$BACKEND_PORT|g" "$1"
}

start_proxy() {
	local p=$1 addr=$HOST:${PORT[$1]}
	port_free "${PORT[$p]}" || { echo "run.sh: port ${PORT[$p]} is in use" >&2; exit 1; }
	case $p in
	portcullis | portcullis-syn | portcullis-rst | portcullis-nethttp | portcullis-log)
		render "$REPO/bench/peers/$p.yaml" "$addr" >"$TMP/$p.yaml"
		start "$p" "$TMP/bin/portcullis" run --config "$TMP/$p.yaml" ;;
	floor)
		start floor "$TMP/bin/floor" -listen "$addr" -upstream "$HOST:$BACKEND_PORT" -probe ;;
	floor-admit)
		start floor-admit "$TMP/bin/floor" -listen "$addr" -upstream "$HOST:$BACKEND_PORT" -admit ;;
	floor-epoll-admit)
		start floor-epoll-admit "$TMP/bin/floor" -listen "$addr" -upstream "$HOST:$BACKEND_PORT" -admit -epoll ;;
	nginx)
		mkdir -p "$TMP/nginx"
		render "$REPO/bench/peers/nginx.conf" "$addr" >"$TMP/nginx.conf"
		nginx -t -q -p "$TMP/nginx" -e "$TMP/nginx-error.log" -c "$TMP/nginx.conf"
		start nginx nginx -p "$TMP/nginx" -e "$TMP/nginx-error.log" -c "$TMP/nginx.conf" ;;
	haproxy)
		render "$REPO/bench/peers/haproxy.cfg" "$addr" >"$TMP/haproxy.cfg"
		haproxy -c -q -f "$TMP/haproxy.cfg"
		start haproxy haproxy -db -f "$TMP/haproxy.cfg" ;;
	esac
	wait_http "http://$addr/"
	log "$p is up on $addr (pid ${PID[$p]})"
}

# tree_cpu prints the CPU ticks (utime+stime, 1/100 s) of a PID and its
# children: nginx's master and workers; HAProxy and Portcullis are one process.
tree_cpu() {
	local root=$1 total=0 pid stat f
	for pid in "$root" $(ps -o pid= --ppid "$root" 2>/dev/null); do
		stat=$(<"/proc/$pid/stat") || continue
		read -r -a f <<<"${stat##*) }"
		total=$((total + f[11] + f[12]))
	done
	echo "$total"
}

# busy_ticks prints the CPU ticks the whole machine (all cores) spent busy.
busy_ticks() {
	local cpu user nice system idle iowait irq softirq steal rest
	read -r cpu user nice system idle iowait irq softirq steal rest </proc/stat
	echo $((user + nice + system + irq + softirq + steal))
}

# children_ticks prints the CPU ticks of this shell's waited-for children.
children_ticks() {
	local stat f
	stat=$(</proc/$$/stat)
	read -r -a f <<<"${stat##*) }"
	echo $((f[13] + f[14]))
}

# siege_run NAME PROXY SCENARIO ROUND ARGS...: one siege run, its JSON report
# and the proxy's CPU ticks and wall time around it.
siege_run() {
	local target=$1 scenario=$2 round=$3
	shift 3
	local pid=${PID[$target]} file="$RAW/$target.$scenario.$round"
	local c0 c1 t0 t1 m0 m1 b0 b1 s0 s1 rc=0
	c0=$(tree_cpu "$pid")
	b0=$(tree_cpu "${PID[direct]}")
	s0=$(children_ticks)
	m0=$(busy_ticks)
	t0=$(date +%s%N)
	# In the background, so that a signal to this script is handled at once.
	"$TMP/bin/portcullis" siege -json -cpu-pid "$pid" -duration "$DURATION" "$@" \
		"http://$HOST:${PORT[$target]}/" >"$file.json" 2>"$file.err" &
	local siege=$!
	STARTED+=("$siege")
	wait "$siege" || rc=$?
	REAPED[$siege]=1
	t1=$(date +%s%N)
	m1=$(busy_ticks)
	s1=$(children_ticks)
	b1=$(tree_cpu "${PID[direct]}")
	c1=$(tree_cpu "$pid")
	[[ $target == direct ]] && b1=$b0 # the backend is the target: counted once
	printf '{"proxy":"%s","scenario":"%s","round":%d,"exit":%d,"cpu_ticks":%d,"wall_ns":%d,"machine_busy_ticks":%d,"backend_ticks":%d,"siege_ticks":%d}\n' \
		"$target" "$scenario" "$round" "$rc" "$((c1 - c0))" "$((t1 - t0))" \
		"$((m1 - m0))" "$((b1 - b0))" "$((s1 - s0))" >"$file.meta.json"
	log "round $round $target $scenario: exit $rc, cpu $((c1 - c0))0 ms; $(summary "$file.json")"
	sleep 1 # let closed connections settle before the next run
}

summary() {
	jq -r '"\(.legit.goodput_per_s|floor)/s ok, p99 \(.legit.p99_ns/1e6)ms" +
		(if .attack then ", attacker peak held \(.attack.peak_held), reconnects \(.attack.reconnects_per_s|floor)/s" else "" end)' \
		"$1" 2>/dev/null || echo "no report (see $(basename "$1" .json).err)"
}

throughput() { siege_run "$1" throughput "$2" -scenario throughput -clients 16 -conns-per-client 16; }
baseline() { siege_run "$1" none "$2" -scenario none -clients "$LEGIT_CLIENTS" -connections fresh -rate "$LEGIT_RATE"; }
attack() {
	siege_run "$1" "$2" "$3" -scenario "$2" -clients "$LEGIT_CLIENTS" -connections fresh -rate "$LEGIT_RATE" \
		-attack-conns "$ATTACK_CONNS" -max-connect-rate "$ATTACK_RATE" -warmup "$WARMUP"
}

# rotate prints the proxies list rotated by $1, so no proxy always runs first.
rotate() {
	local -a l=($PROXIES)
	local n=${#l[@]} i
	for ((i = 0; i < n; i++)); do printf '%s ' "${l[(i + $1) % n]}"; done
}

# paired are the proxies the issue's throughput targets compare, in the
# order they run within a round: Portcullis next to each peer.
PAIRED="nginx portcullis haproxy portcullis-log"

# throughput_order prints the proxies in the order they run the throughput
# scenario in round $1: those of PAIRED that run, back to back, first in odd
# rounds and last, reversed, in even ones (a slow drift of the machine then
# favours neither side of a pair from one round to the next); the others
# rotated as rotate does.
throughput_order() {
	local p
	local -a paired=() rest=()
	for p in $PAIRED; do [[ " $PROXIES " == *" $p "* ]] && paired+=("$p"); done
	for p in $(rotate "$1"); do [[ " $PAIRED " == *" $p "* ]] || rest+=("$p"); done
	if (($1 % 2)); then
		printf '%s ' "${paired[@]}" "${rest[@]}"
	else
		printf '%s ' "${rest[@]}"
		for ((p = ${#paired[@]} - 1; p >= 0; p--)); do printf '%s ' "${paired[p]}"; done
	fi
}

# profile_portcullis SERVER SUFFIX: a CPU profile of the daemon serving with
# http1_server SERVER under the throughput scenario, written to
# portcullis$SUFFIX-throughput.pprof, pprof-top$SUFFIX.txt and
# pprof-top-cum$SUFFIX.txt.
profile_portcullis() {
	local server=$1 suffix=$2
	log "profiling Portcullis (http1_server $server) under the throughput scenario"
	render "$REPO/bench/peers/portcullis$suffix.yaml" "$HOST:${PORT[profiled]}" >"$TMP/profiled.yaml"
	start profiled "$TMP/bin/profiled" -config "$TMP/profiled.yaml" -pprof "$HOST:$PPROF_PORT"
	wait_http "http://$HOST:${PORT[profiled]}/"
	local secs=${DURATION%s}
	"$TMP/bin/portcullis" siege -json -scenario throughput -clients 16 -conns-per-client 16 \
		-duration "$((secs + 2))s" "http://$HOST:${PORT[profiled]}/" >"$TMP/profile-siege.json" 2>&1 &
	local siege=$!
	STARTED+=("$siege")
	sleep 1
	curl -s -m $((secs + 10)) -o "$OUT/portcullis$suffix-throughput.pprof" \
		"http://$HOST:$PPROF_PORT/debug/pprof/profile?seconds=$secs"
	wait "$siege" || true
	REAPED[$siege]=1
	stop_pid "${PID[profiled]}"
	go tool pprof -top -nodecount=35 "$TMP/bin/profiled" "$OUT/portcullis$suffix-throughput.pprof" \
		>"$OUT/pprof-top$suffix.txt" 2>/dev/null
	go tool pprof -top -cum -nodecount=35 "$TMP/bin/profiled" "$OUT/portcullis$suffix-throughput.pprof" \
		>"$OUT/pprof-top-cum$suffix.txt" 2>/dev/null
	log "profile written to $OUT/pprof-top$suffix.txt"
}

write_meta() {
	local rev dirty=""
	rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
	[[ -n $(git -C "$REPO" status --porcelain 2>/dev/null) ]] && dirty=" (with uncommitted changes)"
	jq -n --arg nginx "$(nginx -v 2>&1)" --arg haproxy "$(haproxy -v | sed -n 1p)" \
		--arg go "$(go version)" --arg portcullis "$rev$dirty" --arg kernel "$(uname -r)" \
		--arg cpus "$(nproc)" --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" \
		--arg cmd "$CMDLINE" --arg start "$1" --arg end "$(date -u +%FT%TZ)" \
		--arg load_start "$2" --arg load_end "$(cut -d' ' -f1-3 /proc/loadavg)" \
		--arg rounds "$ROUNDS" --arg throughput_rounds "$TROUNDS" --arg duration "$DURATION" --arg warmup "$WARMUP" \
		--arg attack_conns "$ATTACK_CONNS" --arg attack_rate "$ATTACK_RATE" --arg legit "$LEGIT_CLIENTS" --arg legit_rate "$LEGIT_RATE" --arg cap "$CAP" \
		'$ARGS.named' >"$RAW/meta.json"
}

# ---- The TLS scenarios (--tls) ----

TLS_SCENARIOS=${TLS_SCENARIOS:-"https1 h2 hs-full hs-resumed"}
TLS_PAIRED="nginx-tls portcullis-tls haproxy-tls"

# install_tls_tools installs wrk and h2load from Debian when missing.
install_tls_tools() {
	local missing=()
	command -v wrk >/dev/null || missing+=(wrk)
	command -v h2load >/dev/null || missing+=(nghttp2-client)
	((${#missing[@]})) || return 0
	log "installing ${missing[*]} from Debian's packages"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# make_cert writes the ECDSA P-256 certificate and key every TLS proxy
# serves: cert.pem and key.pem, and both in cert-key.pem for HAProxy.
make_cert() {
	openssl ecparam -name prime256v1 -genkey -noout -out "$TMP/key.pem"
	openssl req -new -x509 -key "$TMP/key.pem" -out "$TMP/cert.pem" -days 2 -subj /CN=localhost \
		-addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
	cat "$TMP/cert.pem" "$TMP/key.pem" >"$TMP/cert-key.pem"
}

# start_tls_proxy starts one of TLS_PROXIES. nginx-static is a second
# server of nginx-tls's process: the same PID, started once.
start_tls_proxy() {
	local p=$1 addr=$HOST:${PORT[$1]}
	if [[ $p == nginx-static ]]; then
		[[ -n ${PID[nginx-tls]:-} ]] || start_tls_proxy nginx-tls
		PID[nginx-static]=${PID[nginx-tls]}
		wait_http "https://$addr/" -k
		return
	fi
	port_free "${PORT[$p]}" || { echo "run.sh: port ${PORT[$p]} is in use" >&2; exit 1; }
	case $p in
	portcullis-tls)
		render "$REPO/bench/peers/portcullis-tls.yaml" "$addr" >"$TMP/$p.yaml"
		start "$p" "$TMP/bin/portcullis" run --config "$TMP/$p.yaml" ;;
	nginx-tls)
		port_free "${PORT[nginx-static]}" || { echo "run.sh: port ${PORT[nginx-static]} is in use" >&2; exit 1; }
		mkdir -p "$TMP/nginx-tls"
		render "$REPO/bench/peers/nginx-tls.conf" "$addr" | sed "s|@LISTEN_STATIC@|$HOST:${PORT[nginx-static]}|g" >"$TMP/nginx-tls.conf"
		nginx -t -q -p "$TMP/nginx-tls" -e "$TMP/nginx-tls-error.log" -c "$TMP/nginx-tls.conf"
		start nginx-tls nginx -p "$TMP/nginx-tls" -e "$TMP/nginx-tls-error.log" -c "$TMP/nginx-tls.conf" ;;
	haproxy-tls)
		render "$REPO/bench/peers/haproxy-tls.cfg" "$addr" >"$TMP/haproxy-tls.cfg"
		haproxy -c -q -f "$TMP/haproxy-tls.cfg"
		start haproxy-tls haproxy -db -f "$TMP/haproxy-tls.cfg" ;;
	tlsfloor)
		start tlsfloor "$TMP/bin/tlsfloor" -listen "$addr" -cert "$TMP/cert.pem" -key "$TMP/key.pem" ;;
	tlsfloor-h2check)
		start tlsfloor-h2check "$TMP/bin/tlsfloor" -listen "$addr" -cert "$TMP/cert.pem" -key "$TMP/key.pem" -h2check ;;
	tlsfloor-proxy)
		start tlsfloor-proxy "$TMP/bin/tlsfloor" -listen "$addr" -cert "$TMP/cert.pem" -key "$TMP/key.pem" -h2check \
			-upstream "$HOST:$BACKEND_PORT" ;;
	esac
	wait_http "https://$addr/" -k
	log "$p is up on $addr (pid ${PID[$p]})"
}

# tls_load SCENARIO HOST:PORT: the load generator of a TLS scenario, in
# the foreground, for DURATION.
tls_load() {
	case $1 in
	https1) exec wrk -t2 -c64 -d"$DURATION" "https://$2/" ;;
	h2) exec h2load -t2 -c16 -m16 -D "${DURATION%s}" "https://$2/" ;;
	hs-full) exec "$TMP/bin/tlsconns" -addr "$2" -workers 16 -duration "$DURATION" ;;
	hs-resumed) exec "$TMP/bin/tlsconns" -addr "$2" -workers 16 -duration "$DURATION" -resume ;;
	esac
}

# tls_run TARGET SCENARIO ROUND: one run of a TLS scenario: the load
# generator's output, and the target's CPU ticks and the wall time around it.
tls_run() {
	local target=$1 scenario=$2 round=$3
	local pid=${PID[$target]} file="$RAW/tls/$target.$scenario.$round" rc=0
	local c0 c1 t0 t1 m0 m1 load
	load=$(cut -d' ' -f1 /proc/loadavg)
	c0=$(tree_cpu "$pid")
	m0=$(busy_ticks)
	t0=$(date +%s%N)
	(tls_load "$scenario" "$HOST:${PORT[$target]}") >"$file.out" 2>"$file.err" &
	local gen=$!
	STARTED+=("$gen")
	wait "$gen" || rc=$?
	REAPED[$gen]=1
	t1=$(date +%s%N)
	m1=$(busy_ticks)
	c1=$(tree_cpu "$pid")
	printf '{"proxy":"%s","scenario":"%s","round":%d,"exit":%d,"cpu_ticks":%d,"wall_ns":%d,"machine_busy_ticks":%d,"load_average":%s}\n' \
		"$target" "$scenario" "$round" "$rc" "$((c1 - c0))" "$((t1 - t0))" "$((m1 - m0))" "$load" >"$file.meta.json"
	log "round $round $target $scenario: exit $rc, cpu $((c1 - c0))0 ms, load $load"
	sleep 1
}

# tls_order prints the TLS proxies in the order they run a scenario in
# round $1, as throughput_order does for the throughput scenario.
tls_order() {
	local p
	local -a paired=() rest=()
	for p in $TLS_PAIRED; do [[ " $TLS_PROXIES " == *" $p "* ]] && paired+=("$p"); done
	for p in $TLS_PROXIES; do [[ " $TLS_PAIRED " == *" $p "* ]] || rest+=("$p"); done
	if (($1 % 2)); then
		printf '%s ' "${paired[@]}" "${rest[@]}"
	else
		printf '%s ' "${rest[@]}"
		for ((p = ${#paired[@]} - 1; p >= 0; p--)); do printf '%s ' "${paired[p]}"; done
	fi
}

# profile_tls SCENARIO: a CPU profile of the daemon (portcullis-tls.yaml)
# under a TLS scenario, written to portcullis-tls-SCENARIO.pprof and
# pprof-top-tls-SCENARIO.txt (flat, then cumulative).
profile_tls() {
	local sc=$1 secs=${DURATION%s}
	log "profiling Portcullis under the $sc scenario"
	render "$REPO/bench/peers/portcullis-tls.yaml" "$HOST:${PORT[profiled]}" >"$TMP/profiled-tls.yaml"
	start profiled "$TMP/bin/profiled" -config "$TMP/profiled-tls.yaml" -pprof "$HOST:$PPROF_PORT"
	wait_http "https://$HOST:${PORT[profiled]}/" -k
	local saved=$DURATION
	DURATION=$((secs + 2))s
	(tls_load "$sc" "$HOST:${PORT[profiled]}") >"$TMP/profile-$sc.out" 2>&1 &
	local gen=$!
	DURATION=$saved
	STARTED+=("$gen")
	sleep 1
	curl -s -m $((secs + 10)) -o "$OUT/portcullis-tls-$sc.pprof" \
		"http://$HOST:$PPROF_PORT/debug/pprof/profile?seconds=$secs"
	wait "$gen" || true
	REAPED[$gen]=1
	stop_pid "${PID[profiled]}"
	{
		go tool pprof -top -nodecount=40 "$TMP/bin/profiled" "$OUT/portcullis-tls-$sc.pprof"
		echo
		go tool pprof -top -cum -nodecount=40 "$TMP/bin/profiled" "$OUT/portcullis-tls-$sc.pprof"
	} >"$OUT/pprof-top-tls-$sc.txt" 2>/dev/null
}

tls_main() {
	need_root
	install_peers
	install_tls_tools
	local start_time load_start p r sc
	start_time=$(date -u +%FT%TZ)
	load_start=$(cut -d' ' -f1-3 /proc/loadavg)
	log "building into $TMP/bin (load average $load_start)"
	mkdir -p "$TMP/bin" "$RAW/tls"
	(cd "$REPO" && go build -pgo=cmd/portcullis/release.pgo -o "$TMP/bin/portcullis" ./cmd/portcullis &&
		go build -o "$TMP/bin/backend" ./bench/peers/backend &&
		go build -o "$TMP/bin/profiled" ./bench/peers/profiled &&
		go build -o "$TMP/bin/tlsfloor" ./bench/tlsfloor &&
		go build -o "$TMP/bin/tlsconns" ./bench/peers/tlsconns &&
		(cd bench/peers/chart && go build -o "$TMP/bin/chart" .))
	make_cert
	port_free "$BACKEND_PORT" || { echo "run.sh: port $BACKEND_PORT is in use" >&2; exit 1; }
	start direct "$TMP/bin/backend" -listen "$HOST:$BACKEND_PORT" -delay 2ms
	wait_http "http://$HOST:$BACKEND_PORT/"
	for p in $TLS_PROXIES; do [[ -n ${PID[$p]:-} ]] || start_tls_proxy "$p"; done
	for ((r = 1; r <= ROUNDS; r++)); do
		log "round $r of $ROUNDS"
		for sc in $TLS_SCENARIOS; do
			for p in $(tls_order "$r"); do tls_run "$p" "$sc" "$r"; done
		done
	done
	for p in $TLS_PROXIES; do stop_pid "${PID[$p]}"; done
	if ((PROFILE)); then
		profile_tls h2
		profile_tls https1
	fi
	write_meta "$start_time" "$load_start"
	jq --arg wrk "$(wrk -v 2>&1 | sed -n 1p)" --arg h2load "$(h2load --version)" --arg openssl "$(openssl version)" \
		'. + {wrk: $wrk, h2load: $h2load, openssl: $openssl}' "$RAW/meta.json" >"$RAW/tls/meta.json"
	"$TMP/bin/chart" -tls -raw "$RAW/tls" -md "$OUT/tls-results.md" -json "$OUT/tls-results.json"
	log "wrote $OUT/tls-results.md and $OUT/tls-results.json"
}

main() {
	need_root
	install_peers
	local start_time load_start
	start_time=$(date -u +%FT%TZ)
	load_start=$(cut -d' ' -f1-3 /proc/loadavg)
	log "building into $TMP/bin (load average $load_start)"
	mkdir -p "$TMP/bin"
	(cd "$REPO" && go build -pgo=cmd/portcullis/release.pgo -o "$TMP/bin/portcullis" ./cmd/portcullis &&
		go build -o "$TMP/bin/backend" ./bench/peers/backend &&
		go build -o "$TMP/bin/profiled" ./bench/peers/profiled &&
		go build -o "$TMP/bin/floor" ./bench/floor &&
		(cd bench/peers/chart && go build -o "$TMP/bin/chart" .))

	port_free "$BACKEND_PORT" || { echo "run.sh: port $BACKEND_PORT is in use" >&2; exit 1; }
	start direct "$TMP/bin/backend" -listen "$HOST:$BACKEND_PORT" -delay 2ms
	wait_http "http://$HOST:$BACKEND_PORT/"
	local p r
	for p in $PROXIES; do start_proxy "$p"; done

	local last=$ROUNDS
	((THROUGHPUT && TROUNDS > last)) && last=$TROUNDS
	for ((r = 1; r <= last; r++)); do
		log "round $r of $last"
		if ((THROUGHPUT && r <= TROUNDS)); then
			throughput direct "$r"
			for p in $(throughput_order "$r"); do throughput "$p" "$r"; done
		fi
		((ATTACKS && r <= ROUNDS)) || continue
		for p in $(rotate "$r"); do
			[[ $p == floor* ]] && continue # references, not proxies to attack: throughput only
			baseline "$p" "$r"
			attack "$p" slowloris "$r"
			attack "$p" slow-requests "$r"
		done
	done
	for p in $PROXIES; do stop_pid "${PID[$p]}"; done
	if ((PROFILE)) && [[ " $PROXIES " == *" portcullis "* ]]; then profile_portcullis eventloop ""; fi
	if ((PROFILE)) && [[ " $PROXIES " == *" portcullis-nethttp "* ]]; then profile_portcullis net/http -nethttp; fi
	write_meta "$start_time" "$load_start"
	"$TMP/bin/chart" -raw "$RAW" -md "$OUT/results.md" -png "$OUT/peers.png" -json "$OUT/results.json"
	log "wrote $OUT/results.md, $OUT/results.json and $OUT/peers.png"
}

if ((TLS)); then tls_main; else main; fi
