#!/bin/sh
# make run: a private redis-server under ./var (unless BOTGATE_REDIS_URL is set), the platform
# simulator, demo data, then botgate in the foreground. Ctrl-C stops everything it started.
set -eu
# A shell cannot trap a signal that was ignored when it started (POSIX), and a background job of
# a script, some supervisors and CI runners start us with SIGINT ignored: a SIGINT would then stop
# nothing. Run again with INT, TERM and HUP at their defaults, so that the traps below take them.
ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)
ign=${ign#"${ign%????}"} # the low 16 bits: HUP is 1, INT 2, TERM 15
if [ $((0x$ign & 0x4003)) -ne 0 ] && [ -z "${RUN_SH_SIGNALS_RESET:-}" ]; then
  RUN_SH_SIGNALS_RESET=1 exec env --default-signal=HUP,INT,TERM "$0" "$@"
fi
unset RUN_SH_SIGNALS_RESET
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
var=$root/var
mkdir -p "$var"
pids="" # newest first: stop() ends them in the reverse order of their start

# In the foreground of a terminal, take it with job control: a Ctrl-C then reaches this script
# alone, not make (which would die of it, whatever we exit with) nor the children, which get
# process groups of their own. Without a terminal, setsid keeps the children out of the group a
# SIGINT may be sent to (a supervisor's, `timeout -s INT`'s, CI's), and env undoes the SIGINT
# and SIGQUIT that a shell without job control ignores for its background jobs: botgate drains
# on SIGINT run by hand too. Either way each child gets exactly one signal, from stop().
read -r stat < /proc/$$/stat
set -- ${stat##*) }   # state ppid pgrp session tty tpgid ...
[ "$3" = "$6" ] && set -m
start() { # command...: in the background, in a process group of its own
  case $- in
    *m*) "$@" < /dev/null & ;;
    *) setsid env --default-signal=INT,QUIT "$@" < /dev/null & ;;
  esac
  pids="$!${pids:+ $pids}"
}
stop() { # botgate first (it drains while Redis is still up), then the simulator, then Redis
  # A signal while stopping goes to the child being stopped (botgate: stop draining, answer now)
  # instead of ending this script, which would leave the others running.
  trap 'kill "$p" 2>/dev/null || true' INT TERM HUP
  trap - EXIT
  for p in $pids; do
    kill "$p" 2>/dev/null || true
    while kill -0 "$p" 2>/dev/null; do wait "$p" 2>/dev/null || true; done
  done
  trap - INT TERM HUP
}
trap stop EXIT
trap 'stop; exit 0' INT TERM HUP

wait_file() { # path what
  i=0
  while [ ! -e "$1" ]; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "make run: $2 did not start (see $var/*.log)" >&2; exit 1; }
    sleep 0.1
  done
}

if [ -z "${BOTGATE_REDIS_URL:-}" ]; then
  rm -f "$var/redis.sock"
  start redis-server --port 0 --unixsocket "$var/redis.sock" --unixsocketperm 700 --dir "$var" \
    --save "" --appendonly no --daemonize no > "$var/redis.log" 2>&1
  wait_file "$var/redis.sock" redis-server
  BOTGATE_REDIS_URL="unix://$var/redis.sock"
fi
export BOTGATE_REDIS_URL

rm -f "$var/sim.port"
start "$bin/botgate-sim" --listen 127.0.0.1:0 --port-file "$var/sim.port" --quiet > "$var/sim.log" 2>&1
wait_file "$var/sim.port" "the platform simulator"
sim="http://127.0.0.1:$(cat "$var/sim.port")"

"$root/scripts/demo-data.sh" "$sim" > "$var/demo.log" 2>&1 || { cat "$var/demo.log" >&2; exit 1; }
# botgatectl's own note about the token goes to the log: the token is shown once, below.
token=$("$bin/botgatectl" token create --app demo --scope bot:admin --label "make run demo" \
  2>> "$var/demo.log") || { cat "$var/demo.log" >&2; exit 1; }

listen=${BOTGATE_LISTEN:-127.0.0.1:8080}
port=${listen##*:}
export BOTGATE_LISTEN="$listen"
export BOTGATE_FACEBOOK_API_URL="$sim/graph/v19.0"
export BOTGATE_WHATSAPP_CLOUD_API_URL="$sim/graph/v19.0"
export BOTGATE_SLACK_API_URL="$sim/slack/api"
export BOTGATE_WECHAT_API_URL="$sim/wechat"
export BOTGATE_TEAMWORK_API_URL="$sim/teamwork/appstore/api"
export BOTGATE_ALLOW_PRIVATE_MEDIA=1   # the demo's images live on the simulator, on loopback
export BOTGATE_WORKERS="${BOTGATE_WORKERS:-2}"

start "$bin/botgate"
botgate=$!
# The lines below work once they are shown: botgate listens and has Redis.
i=0
until curl -sf -m 1 -o /dev/null "http://127.0.0.1:$port/readyz"; do
  if ! kill -0 "$botgate" 2>/dev/null; then
    wait "$botgate" || exit $?  # botgate's own error is on the screen
    exit 1
  fi
  i=$((i + 1)); [ $i -gt 100 ] && { echo "make run: botgate is not ready after 10 s" >&2; exit 1; }
  sleep 0.1
done

cat <<EOT

botgate demo: Redis $BOTGATE_REDIS_URL, platform simulator $sim
Demo token (stored only as its SHA-256, not shown again): $token

Send a message (paste in another terminal):

curl -s -X POST 'http://127.0.0.1:$port/sendResponses' -H 'Authorization: Bearer $token' -H 'Content-Type: application/json' -d '{"channelId":"demo-facebook","memberId":"demo-fb-member","response":[{"type":"TEXT","text":"Hello from botgate"}]}'

Move the member to a node of the demo tree (runs its actions and sends its responses):

curl -s -X POST 'http://127.0.0.1:$port/redirectMemberToNode' -H 'Authorization: Bearer $token' -H 'Content-Type: application/json' -d '{"channelId":"demo-facebook","memberId":"demo-fb-member","redirect":{"tree":"demo-tree","nodeCompositeId":"welcome"},"meta":{"from":"the README"}}'

What the simulated platforms received: curl -s '$sim/_sim/log'
Channels: demo-facebook, demo-whatsapp, demo-whatsapp-cloud, demo-slack, demo-wechat,
demo-teamwork (members demo-fb-member, demo-wa-member, demo-cloud-member, demo-slack-member,
demo-wechat-member, demo-teamwork-member). Ctrl-C stops botgate, the simulator and Redis.

EOT
wait "$botgate"
