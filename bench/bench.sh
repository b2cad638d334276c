#!/usr/bin/env bash
# make bench: botgate and nginx side by side, in one run, against the same upstreams.
#
# Starts a private redis-server (free port, no persistence), a static upstream (a second nginx,
# bench/nginx-upstream.conf.in, answering the Messenger Send API call with its success body over
# HTTP and over HTTPS with h2 offered by ALPN, a certificate made here), botgate-sim (1 thread,
# no record: the upstream of d, which needs its 1 s answers), nginx (1 worker_process, a plain
# reverse proxy with keepalive upstream connections, bench/nginx.conf.in: one port per upstream),
# loads the bench data with botgatectl, then runs wrk with bench/bench.lua against each in turn
# for every scenario and prints one table (also written to BENCH_OUT). botgate is started once
# per upstream (static HTTP, static HTTPS, simulator), since it has one Facebook URL.
#
#   BENCH_DURATION=10        seconds per wrk run
#   BENCH_D_DURATION=30      seconds of each scenario-d run (its first second has no answers)
#   BENCH_SCENARIOS="a a-off a-key b c c-lua a-tls a-tls-off a-tls-h1 d d-off d-tls e f g h" scenarios to run
#                            (see bench/README.md; a-off and d-off are a and d on a botgate with
#                            per-member order off, their twins; d-tls is bench/tls_memory.py:
#                            d's memory per send in flight over TLS; e is bench/scenario_e.py:
#                            three instances under one shared rate limit; f is
#                            bench/scenario_f.py: 100,000 queued sends through three instances;
#                            g is bench/scenario_g.py: broadcasts, 1,000,000 recipients
#                            accepted and BENCH_G_MEMBERS delivered by three instances;
#                            h: signed webhooks in, their events posted to a subscriber,
#                            bench/webhooks.py)
#   BENCH_G_MEMBERS=100000   members g delivers (at 1,000/s: BENCH_G_MEMBERS / 1000 seconds)
#   BENCH_G_ACCEPTED=1000000 recipients g accepts by tag (then cancelled: not delivered)
#   BENCH_H_RATE=20000       webhooks/s the bodies of h's maximum run are made for (each is
#                            signed before the run; a run that uses them all reports wraps)
#   BENCH_PAIR_ROUNDS=6      rounds of a and a-off (a-tls and a-tls-off) in turn, after their
#                            own runs: the order on / off ratio of each round and their median
#                            (0: none)
#   BENCH_PAIR_DURATION=4    seconds of each run of those rounds
#   BENCH_CONNECTIONS=64     wrk connections of a, b, c, a-tls and a-tls-h1
#   BENCH_WRK_THREADS=2      wrk threads
#   BENCH_UPSTREAM_WORKERS=auto  worker_processes of the static upstream nginx
#   BENCH_STRACE_REQUESTS=20000  requests of each strace phase (0: no strace phase)
#   BENCH_STRACE_SCENARIOS="a a-tls a-tls-h1"  scenarios whose system calls per request are counted
#   BENCH_OUT=build-release/bench-latest.txt
#   BOTGATE_WORKERS=1, BOTGATE_MAX_CONNECTIONS=20000, BOTGATE_REDIS_MAX_IN_FLIGHT=50000
#   BOTGATE_MEMBER_ORDER=1   the product's default: per-member order on (a-off and d-off: 0)
#   BENCH_MEMBERS=8192       members botgate's requests are spread over (bench-m0 ...), a share
#                            per wrk thread, so that no request waits for its member's turn:
#                            more than d's 5000 connections (1: every request to one member)
#   BENCH_PACE_MS=20         mean pause after each answer in the paced (added-latency) runs
#   BENCH_HOLD=1             start and load everything, print the addresses, pids and wrk
#                            commands, and wait for Ctrl-C instead of running (for strace/perf);
#                            botgate's upstream: the static one over HTTP (1 or http), over
#                            HTTPS (tls) or the simulator (sim); its order-off twin beside it
#
# Expects a Release build in build-release (make bench does it). Every process it starts is
# stopped on exit, Ctrl-C included.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bench=$root/bench
bin=${BOTGATE_BIN_DIR:-$root/build-release/bin}
duration=${BENCH_DURATION:-10}
# Scenario d's first second can have no answer (the upstream takes 1 s): over 10 s that
# alone would cap it at 90 % of its Little's-law bound, over 30 s at 97 %.
d_duration=${BENCH_D_DURATION:-30}
scenarios=${BENCH_SCENARIOS:-a a-off a-key b c c-lua a-tls a-tls-off a-tls-h1 d d-off d-tls e f g h}
conns=${BENCH_CONNECTIONS:-64}
wrk_threads=${BENCH_WRK_THREADS:-2}
upstream_workers=${BENCH_UPSTREAM_WORKERS:-auto}
strace_requests=${BENCH_STRACE_REQUESTS:-20000}
strace_scenarios=${BENCH_STRACE_SCENARIOS:-a a-tls a-tls-h1}
pair_rounds=${BENCH_PAIR_ROUNDS:-6}
pair_duration=${BENCH_PAIR_DURATION:-4}
out=${BENCH_OUT:-$root/build-release/bench-latest.txt}
workers=${BOTGATE_WORKERS:-1}
max_conn=${BOTGATE_MAX_CONNECTIONS:-20000}
redis_inflight=${BOTGATE_REDIS_MAX_IN_FLIGHT:-50000}
report="python3 $bench/report.py"

for tool in wrk nginx redis-server curl python3 openssl; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing (scripts/deps.sh bench)" >&2; exit 1; }
done
for sc in $scenarios; do
  case $sc in
    a | a-off | a-key | b | c | c-lua | a-tls | a-tls-off | a-tls-h1 | d | d-off | d-tls | e | f | g | h) ;;
    *) echo "bench: unknown scenario '$sc' (a a-off a-key b c c-lua a-tls a-tls-off a-tls-h1 d d-off d-tls e f g h)" >&2; exit 2 ;;
  esac
done
has() { case " $scenarios " in *" $1 "*) return 0 ;; esac; return 1; }
if [ "$strace_requests" -gt 0 ] && ! command -v strace >/dev/null; then
  echo "bench: strace is missing (scripts/deps.sh bench): no system-call counts" >&2
  strace_requests=0
fi
for b in botgate botgate-sim botgatectl; do
  [ -x "$bin/$b" ] || { echo "bench: $bin/$b is missing (make bench builds it)" >&2; exit 1; }
done

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
busy_start=$($report busy 2)
echo "bench: before starting, the machine keeps $busy_start of its $(nproc) CPUs busy" >&2
case $busy_start in
  0.[0-2]*) ;;
  *) echo "bench: warning: other jobs are running; every figure will be lower and noisier" >&2 ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/botgate-bench.XXXXXX")
pids=""         # every process started here, in start order
nginx_pid=""
upstream_pid=""
botgate_pid=""

stop_pid() { # pid: TERM, up to 10 s, then KILL
  local p=$1 i=0
  kill -TERM "$p" 2>/dev/null || return 0
  while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  kill -KILL "$p" 2>/dev/null || true
}

cleanup() {
  local rc=$? p list="" workers_left=""
  trap - EXIT INT TERM
  for p in $nginx_pid $upstream_pid; do
    workers_left="$workers_left $(pgrep -P "$p" 2>/dev/null || true)"
  done
  for p in $pids; do list="$p $list"; done   # newest first
  for p in $list; do stop_pid "$p"; done
  for p in $workers_left; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$rc" -eq 0 ]; then
    rm -rf "$tmp"
  else
    echo "bench: failed (exit $rc); logs kept in $tmp" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

die() { echo "bench: $*" >&2; exit 1; }

wait_until() { # what command...: up to 15 s
  local what=$1 i=0
  shift
  until "$@" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 150 ] && die "$what did not start (logs in $tmp)"
    sleep 0.1
  done
}

# ---- file descriptors: d needs 5000 client + 5000 upstream connections per process ----
nofile_asked=65536
ulimit -n "$nofile_asked" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
nofile=$(ulimit -n)
echo "bench: file descriptors: asked $nofile_asked, the machine allowed $nofile" >&2
case " $scenarios " in
  *" d "*) [ "$nofile" != unlimited ] && [ "$nofile" -lt 10200 ] &&
    echo "bench: warning: $nofile descriptors are too few for scenario d (10200+ wanted)" >&2 ;;
esac
[ "$nofile" = unlimited ] && nofile=1048576

read -r redis_port botgate_port nginx_port nginx_tls_port nginx_sim_port up_port up_tls_port \
  up_status_port twin_port <<<"$($report freeport 9 | tr '\n' ' ')"

# ---- redis-server ----
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
  --daemonize no --maxclients 10000 > "$tmp/redis.log" 2>&1 &
redis_pid=$!; pids="$pids $redis_pid"
wait_until redis-server redis-cli -p "$redis_port" ping
export BOTGATE_REDIS_URL="redis://127.0.0.1:$redis_port/0"

# ---- the simulator: d's upstream ----
"$bin/botgate-sim" --listen 127.0.0.1:0 --port-file "$tmp/sim.port" --threads 1 --log-max 0 \
  --quiet > "$tmp/sim.log" 2>&1 &
sim_pid=$!; pids="$pids $sim_pid"
wait_until botgate-sim test -s "$tmp/sim.port"
sim_port=$(cat "$tmp/sim.port")
sim="http://127.0.0.1:$sim_port"

sim_latency() { # ms
  curl -sf -X POST "$sim/_sim/config" -H 'Content-Type: application/json' \
    -d "{\"latency_ms\":$1}" > /dev/null || die "cannot set the simulator latency"
}

# ---- the static upstream: a second nginx, HTTP and HTTPS (h2 by ALPN) ----
user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user $(id -un) $(id -gn);"   # workers stay the current user
wc=$((nofile - 64)); [ $wc -gt 16384 ] && wc=16384
mkdir -p "$tmp/tls" "$tmp/upstream" "$tmp/nginx"
cert=$tmp/tls/cert.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$tmp/tls/key.pem" -out "$cert" > "$tmp/tls/openssl.log" 2>&1 ||
  die "openssl could not make the bench certificate (logs in $tmp/tls)"
nginx_conf() { # template prefix [sed expressions...]
  local in=$1 prefix=$2
  shift 2
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@NOFILE@|$nofile|g" -e "s|@WORKER_CONNECTIONS@|$wc|g" \
    -e "s|@USER_LINE@|$user_line|g" -e "s|@CERT@|$cert|g" "$@" "$in" > "$prefix/nginx.conf"
}
start_nginx() { # prefix: sets started_pid (the master, a child of this script)
  nginx -p "$1/" -c "$1/nginx.conf" -e "$1/error.log" -g 'daemon off;' > "$1/stdout.log" 2>&1 &
  started_pid=$!; pids="$pids $started_pid"
}
nginx_conf "$bench/nginx-upstream.conf.in" "$tmp/upstream" -e "s|@WORKERS@|$upstream_workers|g" \
  -e "s|@HTTP_PORT@|$up_port|g" -e "s|@TLS_PORT@|$up_tls_port|g" \
  -e "s|@STATUS_PORT@|$up_status_port|g" -e "s|@KEY@|$tmp/tls/key.pem|g"
start_nginx "$tmp/upstream"; upstream_pid=$started_pid
upstream="http://127.0.0.1:$up_port"
upstream_tls="https://127.0.0.1:$up_tls_port"
upstream_status="http://127.0.0.1:$up_status_port/status"
wait_until "the static upstream" curl -sf "$upstream_status"

# ---- nginx, the proxy ----
nginx_conf "$bench/nginx.conf.in" "$tmp/nginx" -e "s|@PORT@|$nginx_port|g" \
  -e "s|@TLS_PROXY_PORT@|$nginx_tls_port|g" -e "s|@SIM_PROXY_PORT@|$nginx_sim_port|g" \
  -e "s|@SIM_PORT@|$sim_port|g" -e "s|@UP_HTTP_PORT@|$up_port|g" -e "s|@UP_TLS_PORT@|$up_tls_port|g"
start_nginx "$tmp/nginx"; nginx_pid=$started_pid
nginx="http://127.0.0.1:$nginx_port"
nginx_tls="http://127.0.0.1:$nginx_tls_port"
nginx_sim="http://127.0.0.1:$nginx_sim_port"
wait_until nginx curl -s -o /dev/null "$nginx/"

# ---- data ----
ctl=$bin/botgatectl
now=$(date +%s)000
# the shared rate limits on, generous enough never to wait: a, b, c measure their cost, not a queue
printf '{"_id":"bench-fb","app":"bench","type":"facebook","on":true,"name":"bench facebook","info":{"accessToken":"bench-page-token","pageId":"100200300"},"rateLimit":{"perSecond":1000000,"burst":100000},"createdAt":%s,"updatedAt":%s}' \
  "$now" "$now" | "$ctl" channel put - > /dev/null 2>> "$tmp/ctl.log"
printf '{"_id":"bench-member","channel":"bench-fb","app":"bench","externalId":"2456789012345678","platform":"facebook","firstName":"Bench","lastName":"User","locale":"en","customLocale":null,"tags":[],"meta":{},"botMeta":{"tree":null,"nodeCompositeId":null,"liveChat":false,"subscribed":true,"tempData":{}},"createdAt":%s,"updatedAt":%s}' \
  "$now" "$now" | "$ctl" member put - > /dev/null 2>> "$tmp/ctl.log"
cat > "$tmp/tree.json" <<'EOT'
{"_id":"bench-tree","app":"bench","name":"bench tree","nodes":{"two":{"response":[
 {"type":"TEXT","text":"hello from the bench tree, first of two"},
 {"type":"TEXT","text":"hello from the bench tree, second of two"}]},
 "lua":{"transform":"if self.agendaMeta.status == 'shipped' then return {{type = 'TEXT', text = 'hello from the bench tree, first of two'}, {type = 'TEXT', text = 'hello from the bench tree, second of two'}} end return nil"}}}
EOT
"$ctl" tree import "$tmp/tree.json" > /dev/null 2>> "$tmp/ctl.log"
# the members botgate's requests are spread over: bench-m0 by botgatectl, its copies in one
# script (bench/members.lua; one botgatectl call each took minutes for d's thousands)
members=${BENCH_MEMBERS:-8192}
if [ "$members" -gt 1 ]; then
  printf '{"_id":"bench-m0","channel":"bench-fb","app":"bench","externalId":"3000000000000000","platform":"facebook","firstName":"Bench","lastName":"User","locale":"en","customLocale":null,"tags":[],"meta":{},"botMeta":{"tree":null,"nodeCompositeId":null,"liveChat":false,"subscribed":true,"tempData":{}},"createdAt":%s,"updatedAt":%s}' \
    "$now" "$now" | "$ctl" member put - > /dev/null 2>> "$tmp/ctl.log"
  redis-cli -p "$redis_port" --eval "$bench/members.lua" 'botgate:member:{bench-fb}:bench-m0' \
    'botgate:recipient:{bench-fb}:3000000000000000' , "$members" bench-m0 3000000000000000 \
    bench-m 3 15 > "$tmp/members.log" 2>&1 && grep -qx "$members" "$tmp/members.log" ||
    die "could not load $members members: $(head -c 300 "$tmp/members.log")"
fi
token=$("$ctl" token create --app bench --scope bot:admin --label "make bench" 2>> "$tmp/ctl.log")

# ---- one request of each kind, so that a broken setup fails here and not as wrk errors ----
check() { # name url path body [token]
  local code
  : > "$tmp/check.out"
  code=$(curl -s -m 10 --cacert "$cert" -o "$tmp/check.out" -w '%{http_code}' -X POST "$2$3" \
    -H 'Content-Type: application/json' ${5:+-H "Authorization: Bearer $5"} -d "$4") || true
  { echo "== $1: HTTP $code"; cat "$tmp/check.out"; echo; } >> "$tmp/checks.log"
  [ "$code" = 200 ] || die "$1 answered HTTP $code: $(head -c 500 "$tmp/check.out")"
  case $1 in
    botgate*) grep -q '^{"ok":1' "$tmp/check.out" ||
      die "$1 answered 200 without ok:1: $(head -c 500 "$tmp/check.out")" ;;
  esac
}
# The HTTP version the static upstream saw for the check just made: it names it in the
# message_id ("m_bench.HTTP/2.0.17"), which botgate answers as messageId and nginx passes on.
check_protocol() {
  { tr -d '\\' < "$tmp/check.out" | grep -o 'm_bench\.[^"]*' || true; } | head -1 |
    sed 's/^m_bench\.//; s/\.[0-9]*$//'
}
fb='{"messaging_type":"RESPONSE","recipient":{"id":"2456789012345678"},"message":{"text":"check"}}'
fb_path=/graph/v19.0/me/messages?access_token=bench-page-token
check "static upstream" "$upstream" "$fb_path" "$fb"
check "static upstream, HTTPS" "$upstream_tls" "$fb_path" "$fb"
check "simulator" "$sim" "$fb_path" "$fb"
check "nginx" "$nginx" "$fb_path" "$fb"
check "nginx, HTTPS upstream" "$nginx_tls" "$fb_path" "$fb"
tls_nginx_proto=$(check_protocol)
check "nginx, simulator" "$nginx_sim" "$fb_path" "$fb"

# ---- botgate: one process per upstream (it has one Facebook URL) ----
member_order=${BOTGATE_MEMBER_ORDER:-1}
knobs="BOTGATE_WORKERS=$workers BOTGATE_MAX_CONNECTIONS=$max_conn BOTGATE_REDIS_MAX_IN_FLIGHT=$redis_inflight BOTGATE_LOG_LEVEL=warn BOTGATE_MEMBER_ORDER=$member_order (a-off, a-tls-off, d-off: 0), requests over BENCH_MEMBERS=$members members"
botgate="http://127.0.0.1:$botgate_port"
twin="http://127.0.0.1:$twin_port"   # the order-off twin of a and d
twin_pid=""
launch_botgate() { # port member-order facebook-base-URL [VAR=value...]: sets launched_pid
  local port=$1 order=$2 fb_url=$3 url=http://127.0.0.1:$1
  shift 3
  echo "== botgate on port $port, member order $order, Facebook at $fb_url" >> "$tmp/botgate.log"
  env BOTGATE_LISTEN="127.0.0.1:$port" \
    BOTGATE_WORKERS="$workers" \
    BOTGATE_MAX_CONNECTIONS="$max_conn" \
    BOTGATE_REDIS_MAX_IN_FLIGHT="$redis_inflight" \
    BOTGATE_LOG_LEVEL="${BOTGATE_LOG_LEVEL:-warn}" \
    BOTGATE_MEMBER_ORDER="$order" \
    BOTGATE_FACEBOOK_API_URL="$fb_url" \
    BOTGATE_WHATSAPP_CLOUD_API_URL="$sim/graph/v19.0" \
    BOTGATE_SLACK_API_URL="$sim/slack/api" \
    BOTGATE_WECHAT_API_URL="$sim/wechat" \
    BOTGATE_TEAMWORK_API_URL="$sim/teamwork/appstore/api" \
    "$@" "$bin/botgate" >> "$tmp/botgate.log" 2>&1 &
  launched_pid=$!; pids="$pids $launched_pid"
  wait_until botgate curl -sf "$url/readyz"
  check "botgate sendResponses ($fb_url, order $order)" "$url" /sendResponses \
    '{"channelId":"bench-fb","memberId":"bench-member","response":[{"type":"TEXT","text":"check"}]}' "$token"
  launched_proto=$(check_protocol)
  check "botgate redirectMemberToNode ($fb_url, order $order)" "$url" /redirectMemberToNode \
    '{"channelId":"bench-fb","memberId":"bench-member","redirect":{"tree":"bench-tree","nodeCompositeId":"two"}}' "$token"
  check "botgate redirectMemberToNode, a transform ($fb_url, order $order)" "$url" /redirectMemberToNode \
    '{"channelId":"bench-fb","memberId":"bench-member","redirect":{"tree":"bench-tree","nodeCompositeId":"lua"},"meta":{"status":"shipped"}}' "$token"
}
start_botgate() { # facebook base URL [VAR=value...]: the product's defaults (member order on)
  launch_botgate "$botgate_port" "$member_order" "$@"
  botgate_pid=$launched_pid
  botgate_proto=$launched_proto
}
start_twin() { # facebook base URL [VAR=value...]: as start_botgate with member order off
  launch_botgate "$twin_port" 0 "$@"
  twin_pid=$launched_pid
}
stop_botgate() { # both
  local p
  for p in $botgate_pid $twin_pid; do
    stop_pid "$p"
    wait "$p" 2>/dev/null || true
    pids=$(echo " $pids " | sed "s/ $p / /")
  done
  botgate_pid=""
  twin_pid=""
}

if [ "${BENCH_HOLD:-0}" != 0 ]; then
  case $BENCH_HOLD in
    tls) hurl=$upstream_tls/graph/v19.0; hsc=a-tls; hng=$nginx_tls
         start_botgate "$hurl" BOTGATE_CA_FILE="$cert"; start_twin "$hurl" BOTGATE_CA_FILE="$cert" ;;
    sim) hurl=$sim/graph/v19.0; hsc=d; hng=$nginx_sim
         start_botgate "$hurl"; start_twin "$hurl" ;;
    *) hurl=$upstream/graph/v19.0; hsc=a; hng=$nginx
       start_botgate "$hurl"; start_twin "$hurl" ;;
  esac
  cat >&2 <<EOT
bench: BENCH_HOLD=$BENCH_HOLD: everything runs until Ctrl-C (logs in $tmp)
  botgate $botgate (pid $botgate_pid), Facebook upstream used: $botgate_proto
  its order-off twin $twin (pid $twin_pid): the same wrk line with $twin
  nginx $nginx (static upstream), $nginx_tls (static upstream over TLS), $nginx_sim (simulator)
    (master pid $nginx_pid, worker $(pgrep -P "$nginx_pid" | tr '\n' ' '))
  static upstream $upstream and $upstream_tls (master pid $upstream_pid, status $upstream_status)
  simulator $sim (pid $sim_pid)   redis 127.0.0.1:$redis_port (pid $redis_pid)
  certificate $cert (BOTGATE_CA_FILE, curl --cacert)
  BENCH_THREADS=2 BENCH_MEMBERS=$members wrk -t2 -c64 -d10s --latency -s $bench/bench.lua $botgate -- botgate $hsc $token
  wrk -t2 -c64 -d10s --latency -s $bench/bench.lua $hng -- upstream $hsc
EOT
  trap 'exit 0' INT TERM
  while :; do sleep 3600 & pids="$pids $!"; wait $!; done
fi

# ---- the runs ----
results=$tmp/results.jsonl
: > "$results"
failed=0

target_of() { # scenario target: sets url, mode, pidlist, aux, counter (report.py options)
  local sc=$1 target=$2 ports=$up_port
  url=""; mode=upstream; aux=""
  counter=(--upstream-status "$upstream_status")
  case $sc in
    d | d-off | sim) counter=(--sim "$sim"); ports="" ;;   # 10 000 sockets: too costly to sample
    h | h-*) counter=(); ports="" ;;
    a-tls | a-tls-off | a-tls-h1 | up-tls) ports=$up_tls_port ;;
  esac
  case $target in
    botgate) url=$botgate; mode=botgate; pidlist=$botgate_pid; aux="redis=$redis_pid"
      counter+=(--redis-port "$redis_port")
      case $sc in *-off) url=$twin; pidlist=$twin_pid ;; esac ;;   # the order-off twin
    nginx) pidlist=$nginx_pid
      case $sc in d) url=$nginx_sim ;; a-tls | a-tls-h1) url=$nginx_tls ;; *) url=$nginx ;; esac ;;
    upstream) pidlist=$upstream_pid; ports=""
      case $sc in up-tls) url=$upstream_tls ;; *) url=$upstream ;; esac ;;
    sim) url=$sim; pidlist=$sim_pid; ports="" ;;
  esac
  case $sc:$target in
    h:botgate | h-*:botgate) counter+=(--sim "$subsim"); aux="$aux,upstream=$sub_pid" ;;   # the subscriber
    h*:*) ;;
    d:* | d-off:* | sim:*) aux="${aux:+$aux,}sim=$sim_pid" ;;
    *:botgate | *:nginx) aux="${aux:+$aux,}upstream=$upstream_pid" ;;
  esac
  [ -n "$ports" ] && counter+=(--upstream-ports "$ports")
  return 0
}

run() { # scenario target connections [extra wrk options...]
  local sc=$1 target=$2 c=$3 url mode pidlist aux counter t=$wrk_threads
  local script=$bench/bench.lua
  shift 3
  target_of "$sc" "$target"
  local sargs=("$mode" "$sc" "$token")
  case $sc in   # h: the webhooks signed beforehand, $tmp/h-<run>.<thread>
    h | h-*) script=$bench/webhook.lua; sargs=(/webhooks/bench-hook "$tmp/h-${hfiles:-$sc}") ;;
  esac
  [ "$t" -gt "$c" ] && t=$c
  BENCH_THREADS=$t BENCH_MEMBERS=$members \
    $report measure --out "${run_out:-$results}" --log "$tmp/wrk.log" --scenario "$sc" --target "$target" \
    --connections "$c" --pids "$pidlist" --aux "$aux" --kind "${run_kind:-}" "${counter[@]}" -- \
    wrk "-t$t" "-c$c" "-d${run_duration:-$duration}s" --latency "$@" -s "$script" "$url" \
    -- "${sargs[@]}" || {
    local rc=$?
    [ $rc -ge 128 ] && exit $rc   # interrupted
    failed=1
  }
  sleep 1
}

# A scenario and its order-off twin in turn, short runs, on first then off first (ABBA...): the
# machine's drift over a minute moves one long run of each by more than order costs; the table
# gives each round's ratio and their median (report.py order_rounds)
order_rounds() { # scenario twin
  local i first=$1 second=$2 swap
  [ "$pair_rounds" -gt 0 ] || return 0
  echo "bench: $1 and $2 in turn, $pair_rounds rounds of $pair_duration s" >&2
  for i in $(seq "$pair_rounds"); do
    run_kind=pair run_duration=$pair_duration run "$first" botgate "$conns"
    run_kind=pair run_duration=$pair_duration run "$second" botgate "$conns"
    swap=$first first=$second second=$swap   # the next round starts with the other
  done
}

# strace -c over a fixed number of requests, after the timed runs of the same botgate
syscalls() { # scenario target
  local sc=$1 target=$2 url mode pidlist aux counter pid t=$wrk_threads
  target_of "$sc" "$target"
  pid=$pidlist
  [ "$target" = nginx ] && pid=$(pgrep -P "$nginx_pid" | head -1)
  BENCH_COUNT=$((strace_requests / t)) $report syscalls --out "$results" \
    --summary "$tmp/strace-$sc-$target.txt" --log "$tmp/wrk.log" --scenario "$sc" \
    --target "$target" --pid "$pid" --connections "$conns" -- \
    wrk "-t$t" "-c$conns" -d120s -s "$bench/bench.lua" "$url" -- "$mode" "$sc" "$token" || {
    local rc=$?
    [ $rc -ge 128 ] && exit $rc
    failed=1
  }
  sleep 1
}
strace_phase() { # scenario
  [ "$strace_requests" -gt 0 ] || return 0
  case " $strace_scenarios " in *" $1 "*) ;; *) return 0 ;; esac
  echo "bench: system calls per request, $1 ($strace_requests requests each, under strace)" >&2
  syscalls "$1" botgate
  syscalls "$1" nginx
}

echo "bench: $duration s per run; scenarios: $scenarios" >&2

# a, a-off, b, c, c-lua, a-key: the static upstream over HTTP
if has a || has a-off || has b || has c || has c-lua || has a-key; then
  start_botgate "$upstream/graph/v19.0"
  has a-off && start_twin "$upstream/graph/v19.0"
  # a fresh process's first seconds are slower (its allocator, Redis's and the upstream's
  # connections): both botgates warm up alike before a and its twin (not reported)
  echo "bench: warming botgate up (a, 3 s, not reported)" >&2
  has a && run_out=$tmp/warm.jsonl run_duration=3 run a botgate "$conns"
  has a-off && run_out=$tmp/warm.jsonl run_duration=3 run a-off botgate "$conns"
  echo "bench: the static upstream alone (its capacity)" >&2
  run up upstream "$conns"
  for sc in $scenarios; do
    case $sc in
      a | b | c | c-lua)
        echo "bench: scenario $sc" >&2
        run "$sc" botgate "$conns"
        # a's twin right after it: the machine as alike as it gets for the two
        [ "$sc" = a ] && has a-off && { echo "bench: scenario a-off" >&2; run a-off botgate "$conns"
                                        order_rounds a a-off; }
        run "$sc" nginx "$conns"
        ;;
      a-off)
        has a || { echo "bench: scenario a-off" >&2; run a-off botgate "$conns"; } ;;
      a-key)   # botgate only: nginx has no such thing
        echo "bench: scenario $sc" >&2
        run "$sc" botgate "$conns"
        ;;
    esac
  done
  pace_desc=""
  pace_delay=${BENCH_PACE_MS:-20}
  if has a && read -r pconns prate <<<"$($report pace "$results" --delay "$pace_delay")"; then
    pace_desc="$prate req/s, the half of botgate's scenario-a req/s"
    echo "bench: p99 added latency: scenario a paced at ~$prate req/s" >&2
    export BENCH_DELAY_MS=$pace_delay
    for target in upstream botgate nginx; do
      # a short run to see what rate $pconns connections give, then the corrected count
      : > "$tmp/calib.jsonl"
      run_out=$tmp/calib.jsonl run_duration=3 run calib "$target" "$pconns"
      read -r c _ <<<"$($report pace "$results" --calib "$tmp/calib.jsonl" --conns "$pconns")"
      run lat "$target" "$c"
    done
    unset BENCH_DELAY_MS
  fi
  has a && strace_phase a
  stop_botgate
fi

# a-tls: the static upstream over HTTPS, h2 and http/1.1 offered by ALPN; botgate calls it over
# its own HTTP/2 (BOTGATE_UPSTREAM_HTTP=2, its default), the calls in flight as streams
# (a-tls-off: its order-off twin, run right after it, as a-off is a's)
tls_botgate_proto=""
if has a-tls || has a-tls-off; then
  start_botgate "$upstream_tls/graph/v19.0" BOTGATE_CA_FILE="$cert" BOTGATE_UPSTREAM_HTTP=2
  has a-tls-off && start_twin "$upstream_tls/graph/v19.0" BOTGATE_CA_FILE="$cert" BOTGATE_UPSTREAM_HTTP=2
  tls_botgate_proto=$botgate_proto
  echo "bench: scenario a-tls (botgate's upstream calls: $tls_botgate_proto, nginx's: $tls_nginx_proto)" >&2
  run up-tls upstream "$conns"
  has a-tls && run a-tls botgate "$conns"
  has a-tls-off && { echo "bench: scenario a-tls-off" >&2; run a-tls-off botgate "$conns"; }
  has a-tls && has a-tls-off && order_rounds a-tls a-tls-off
  run a-tls nginx "$conns"
  strace_phase a-tls
  stop_botgate
fi

# a-tls-h1: as a-tls with botgate calling over HTTP/1.1 (BOTGATE_UPSTREAM_HTTP=1.1: botgate's own
# HTTP/1.1 over OpenSSL): a kept-alive TLS connection per call in flight, as nginx does, against
# a-tls's HTTP/2 streams
tls_h1_botgate_proto=""
if has a-tls-h1; then
  start_botgate "$upstream_tls/graph/v19.0" BOTGATE_CA_FILE="$cert" BOTGATE_UPSTREAM_HTTP=1.1
  tls_h1_botgate_proto=$botgate_proto
  echo "bench: scenario a-tls-h1 (botgate's upstream calls: $tls_h1_botgate_proto, nginx's: $tls_nginx_proto)" >&2
  has a-tls || run up-tls upstream "$conns"
  run a-tls-h1 botgate "$conns"
  run a-tls-h1 nginx "$conns"
  strace_phase a-tls-h1
  stop_botgate
fi

# d: the simulator, which can hold each answer 1 s; d-off, its twin with member order off
if has d || has d-off; then
  has d && start_botgate "$sim/graph/v19.0"
  has d-off && start_twin "$sim/graph/v19.0"
  # d's memory per send in flight is measured from the RSS before its run: let the fresh
  # process first do what a, b and c did in one process before (not measured, not reported)
  echo "bench: scenario d: warming botgate up (a, b, c against the simulator, 3 s each)" >&2
  for sc in a b c; do
    has d && run_out=$tmp/warm.jsonl run_duration=3 run "$sc" botgate "$conns"
    has d-off && run_out=$tmp/warm.jsonl run_duration=3 run "$sc-off" botgate "$conns"
  done
  echo "bench: scenario d (simulator latency 1000 ms, 5000 connections)" >&2
  sim_latency 1000
  if has d; then
    run_duration=$d_duration run d botgate 5000 --timeout 10s
    sleep 2   # requests cut off by wrk's end are still finishing upstream
  fi
  if has d-off; then
    echo "bench: scenario d-off" >&2
    run_duration=$d_duration run d-off botgate 5000 --timeout 10s
    sleep 2
  fi
  has d && run_duration=$d_duration run d nginx 5000 --timeout 10s
  sim_latency 0
  stop_botgate
fi

# d-tls: d's memory per send in flight with the platform over TLS, for each upstream HTTP
# setting (bench/tls_memory.py: the simulator 1 s behind an nginx HTTPS front offering h2, 2000
# sends in flight, a botgate, Redis and simulator of its own)
dtls_lines=""
if has d-tls; then
  echo "bench: scenario d-tls (memory per send in flight over TLS, 2000 in flight)" >&2
  dtls_lines=$(python3 "$bench/tls_memory.py" "$bin" 2000 2>> "$tmp/tls_memory.log" || true)
  case $dtls_lines in
    *"HTTP/2 "*"KiB per send"*"HTTP/1.1"*"KiB per send"*) ;;
    *) echo "bench: scenario d-tls failed (log: $tmp/tls_memory.log)" >&2; failed=1 ;;
  esac
fi

# e: three instances of their own (one worker each, their own Redis and simulator) under one
# whatsapp-cloud number's shared limit of 1,000/s
e_line=""
if has e; then
  echo "bench: scenario e (3 instances, one shared limit of 1000/s, ${duration} s)" >&2
  e_line=$(python3 "$bench/scenario_e.py" "$bin" "$duration" 1000 2>> "$tmp/scenario_e.log" |
    grep '^e ' || true)
  [ -n "$e_line" ] || { echo "bench: scenario e failed (log: $tmp/scenario_e.log)" >&2; failed=1; }
fi

# f: the outbox (issue 31): 100,000 sends with Prefer: respond-async on 1,000 members through
# three instances of their own to a whatsapp-cloud number limited to 1,000/s (about 2 minutes)
f_line=""
if has f; then
  echo "bench: scenario f (100,000 queued sends, 3 instances, one limit of 1000/s)" >&2
  f_line=$(python3 "$bench/scenario_f.py" "$bin" 100000 1000 1000 2>> "$tmp/scenario_f.log" |
    grep '^f ' || true)
  [ -n "$f_line" ] || { echo "bench: scenario f failed (log: $tmp/scenario_f.log)" >&2; failed=1; }
fi

# g: broadcasts (issue 34): BENCH_G_ACCEPTED recipients by tag accepted (time, Redis memory per
# queued message), then BENCH_G_MEMBERS delivered by three instances of their own to a
# whatsapp-cloud number limited to 1,000/s, with conversational sync sends beside (their p99
# against idle)
g_line=""
g_members=${BENCH_G_MEMBERS:-100000}
g_accepted=${BENCH_G_ACCEPTED:-1000000}
if has g; then
  echo "bench: scenario g ($g_accepted accepted, $g_members broadcast members delivered, 3 instances, 1000/s)" >&2
  g_line=$(python3 "$bench/scenario_g.py" "$bin" "$g_members" 1000 "$g_accepted" \
    2>> "$tmp/scenario_g.log" | grep '^g ' || true)
  [ -n "$g_line" ] || { echo "bench: scenario g failed (log: $tmp/scenario_g.log)" >&2; failed=1; }
fi

# h: signed Messenger webhooks to /webhooks/bench-hook, as many as one worker takes, then at
# half that rate, paced; each one's event posted, signed, to a subscriber: a simulator of its
# own answering 200 on /hook/status/200 and recording every post (its eventId). Each run's
# bodies are signed beforehand with new message ids (bench/webhooks.py bodies); after each run
# the outbox is left to drain and the subscriber's posts are counted (bench/webhooks.py drain)
subsim=""
sub_pid=""
h_rate=${BENCH_H_RATE:-20000}
h_pace_desc=""
if has h; then
  "$bin/botgate-sim" --listen 127.0.0.1:0 --port-file "$tmp/sub.port" --threads 1 \
    --log-max 2000000 --quiet > "$tmp/sub.log" 2>&1 &
  sub_pid=$!; pids="$pids $sub_pid"
  wait_until "the subscriber" test -s "$tmp/sub.port"
  subsim="http://127.0.0.1:$(cat "$tmp/sub.port")"
  printf '{"_id":"bench-hook","app":"bench","type":"facebook","on":true,"name":"bench webhooks","info":{"accessToken":"bench-page-token","pageId":"100200300","appSecret":"bench-app-secret","verifyToken":"bench-verify"},"createdAt":%s,"updatedAt":%s}' \
    "$now" "$now" | "$ctl" channel put - > /dev/null 2>> "$tmp/ctl.log"
  "$ctl" app secret rotate --app bench > /dev/null 2>> "$tmp/ctl.log"   # the posts are signed
  "$ctl" subscription add --app bench --url "$subsim/hook/status/200" > /dev/null 2>> "$tmp/ctl.log"
  # the subscriber is on loopback: the SSRF guard lets it through only so
  start_botgate "$upstream/graph/v19.0" BOTGATE_ALLOW_PRIVATE_MEDIA=1
  hbodies() { # run count
    python3 "$bench/webhooks.py" bodies "$tmp/h-$1" "$2" "$wrk_threads" bench-app-secret \
      "$1.$$.$(date +%s)" --members "$members" || die "could not sign the webhooks of $1"
  }
  hdrain() { # run [results file]: wait for the outbox to drain, count what the subscriber got
    python3 "$bench/webhooks.py" drain "$subsim" "$botgate" --scenario "$1" \
      --state "$tmp/h.events" --pids "$botgate_pid" --aux "redis=$redis_pid,upstream=$sub_pid" \
      >> "${2:-$results}" 2>> "$tmp/webhooks.log" || { echo "bench: $1: drain failed" >&2; failed=1; }
  }
  echo "bench: scenario h (signing $((h_rate * (duration + 3))) webhooks)" >&2
  hbodies h-warm $((h_rate * 3))
  hbodies h $((h_rate * duration))
  # the senders become members in the warm-up (not reported), as the members of a pre-exist
  echo "bench: warming botgate up (h, 3 s, not reported)" >&2
  run_out=$tmp/warm.jsonl run_duration=3 run h-warm botgate "$conns"
  hdrain h-warm "$tmp/warm.jsonl"
  grep -q '"kind": "delivery", "scenario": "h-warm", "events": [1-9]' "$tmp/warm.jsonl" ||
    die "h: no webhook became an event (logs in $tmp)"
  echo "bench: the webhook generator alone, against the static upstream" >&2
  hfiles=h run h-gen upstream "$conns"
  echo "bench: scenario h, the most one worker takes" >&2
  run h botgate "$conns"
  hdrain h
  pace_delay=${BENCH_PACE_MS:-20}
  if read -r pconns prate <<<"$($report pace "$results" --scenario h --delay "$pace_delay")"; then
    h_pace_desc="$prate webhooks/s, the half of h's"
    echo "bench: scenario h paced at ~$prate webhooks/s" >&2
    hbodies h-calib $((prate * 3 * 3 / 2 + 1000))
    hbodies h-lat $((prate * duration * 3 / 2 + 1000))
    export BENCH_DELAY_MS=$pace_delay
    : > "$tmp/calib.jsonl"
    run_out=$tmp/calib.jsonl run_duration=3 run h-calib botgate "$pconns"
    hdrain h-calib "$tmp/calib.jsonl"
    read -r c _ <<<"$($report pace "$results" --scenario h --calib "$tmp/calib.jsonl" --conns "$pconns")"
    run h-lat botgate "$c"
    hdrain h-lat
    unset BENCH_DELAY_MS
  fi
  stop_botgate
fi

# ---- the report ----
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
python3 -c 'import json, sys; print(json.dumps(dict(a.split("=", 1) for a in sys.argv[1:])))' \
  "date=$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "nproc=$(nproc)" "cpu=$cpu" "kernel=$(uname -r)" \
  "workers=$workers" "duration=$duration" "d_duration=$d_duration" "nofile_asked=$nofile_asked" "nofile=$nofile" \
  "knobs=$knobs (d: client connections and 3 Redis commands per request in flight at once)" \
  "nginx_version=$(nginx -v 2>&1 | sed 's/.*nginx\///')" \
  "wrk_version=$(wrk -v 2>&1 | head -1 | awk '{print $2}')" \
  "load=$load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; CPUs busy before starting: $busy_start" \
  "pace_desc=${pace_desc:-}" "pace_delay=${pace_delay:-}" "h_pace_desc=$h_pace_desc" \
  "upstream_workers=$upstream_workers" "strace_count=$((strace_requests / wrk_threads))" \
  "tls_botgate_proto=$tls_botgate_proto" "tls_h1_botgate_proto=$tls_h1_botgate_proto" \
  "tls_nginx_proto=$tls_nginx_proto" \
  "command=${BENCH_COMMAND:-bench/bench.sh} (BENCH_DURATION=$duration BENCH_D_DURATION=$d_duration BENCH_PAIR_ROUNDS=$pair_rounds BENCH_PAIR_DURATION=$pair_duration BENCH_SCENARIOS=\"$scenarios\" BENCH_G_MEMBERS=$g_members)" \
  > "$tmp/meta.json"
mkdir -p "$(dirname "$out")"
$report table "$results" "$tmp/meta.json" | tee "$out"
[ -z "$dtls_lines" ] || { echo; echo "d-tls: $dtls_lines"; } | tee -a "$out"
[ -z "$e_line" ] || { echo; echo "$e_line"; } | tee -a "$out"
[ -z "$f_line" ] || { echo; echo "$f_line"; } | tee -a "$out"
[ -z "$g_line" ] || { echo; echo "$g_line"; } | tee -a "$out"
cp "$results" "${out%.txt}.jsonl"
if grep -qi 'error\|fatal\|redis down' "$tmp/botgate.log" 2>/dev/null; then
  echo "bench: botgate logged errors (first lines):" >&2
  grep -i 'error\|fatal\|redis down' "$tmp/botgate.log" | head -5 >&2
fi
[ "$failed" -eq 0 ] || die "some runs failed (see above)"
