#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this machine from the Debian rabbitmq-server, beside the broker
# on 5672 and without touching it: each node has its own name, AMQP port (5691-5693), distribution
# port (25691-25693), data and log directories under $CLUSTER_DIR; the Erlang cookie is shared.
#   cluster.sh start            start three fresh nodes and join them (removes an earlier cluster)
#   cluster.sh stop             kill the nodes and remove their data
#   cluster.sh kill-node N      kill -9 node N's Erlang VM (no goodbye to clients or peers)
#   cluster.sh start-node N     start node N again; its data directory makes it rejoin
#   cluster.sh urls             the AMQP URLs, comma-separated (for RABBITMQ_URL)
#   cluster.sh pid N            node N's Erlang VM process id
# Runs as root (rabbitmq-server switches to the rabbitmq user).
set -euo pipefail
CLUSTER_DIR="${CLUSTER_DIR:-/tmp/webhooks-cluster}"

name() { echo "webhooks-c$1@localhost"; }
dir() { echo "$CLUSTER_DIR/c$1"; }

start_node() {
  local i="$1" d
  d="$(dir "$i")"
  # A killed node leaves its pid file behind: `wait` would read the dead pid, or the file while the
  # new node is writing it (":garbage_in_pid_file"). Start without it and wait until it is written.
  rm -f "$d/pid"
  RABBITMQ_NODENAME="$(name "$i")" RABBITMQ_NODE_PORT=$((5690 + i)) RABBITMQ_DIST_PORT=$((25690 + i)) \
    RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" RABBITMQ_PID_FILE="$d/pid" \
    rabbitmq-server -detached
  for _ in $(seq 1 240); do [ -s "$d/pid" ] && break; sleep 0.5; done
  # `wait` follows the pid file until the node has booted (await_startup fails before it is in epmd).
  rabbitmqctl -n "$(name "$i")" wait "$d/pid" --timeout 120 >/dev/null
}

kill_node() {
  local pidfile
  pidfile="$(dir "$1")/pid"
  [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
}

case "${1:-}" in
  start)
    "$0" stop
    for i in 1 2 3; do
      d="$(dir "$i")"
      mkdir -p "$d/mnesia" "$d/log"
      echo "listeners.tcp.local = 127.0.0.1:$((5690 + i))" > "$d/rabbitmq.conf"
      # No plugins: a management listener would clash with the broker on 5672's.
      echo '[].' > "$d/enabled_plugins"
    done
    chown -R rabbitmq:rabbitmq "$CLUSTER_DIR"
    for i in 1 2 3; do start_node "$i" & done
    for job in $(jobs -p); do wait "$job"; done
    for i in 2 3; do
      rabbitmqctl -n "$(name "$i")" stop_app >/dev/null
      rabbitmqctl -n "$(name "$i")" join_cluster "$(name 1)" >/dev/null
      rabbitmqctl -n "$(name "$i")" start_app >/dev/null
    done
    ;;
  stop)
    for i in 1 2 3; do kill_node "$i"; done
    rm -rf "$CLUSTER_DIR"
    ;;
  kill-node) kill_node "$2" ;;
  pid) cat "$(dir "$2")/pid" ;;
  start-node) start_node "$2" ;;
  urls) echo "amqp://guest:guest@127.0.0.1:5691,amqp://guest:guest@127.0.0.1:5692,amqp://guest:guest@127.0.0.1:5693" ;;
  *) echo "usage: $0 start|stop|kill-node N|start-node N|urls|pid N" >&2; exit 2 ;;
esac
