#!/usr/bin/env bash
# `logstamp bench relay` side by side for two builds, each run on servers of its own.
#
# For every round and build in turn: three fresh private MariaDB servers (A the source, B the
# target, C a native replica of A; the flags of docs/benchmarks.md, "Relay") and a fresh Apache
# Kafka node (KRaft, one node, stock settings) are started in DIR, the build's `bench relay`
# runs against them, and everything is stopped. Fresh servers make the rounds independent: no
# run sees another's binlogs, topic or buffer pool. Each result line of the bench (JSON) is
# appended to DIR/results.jsonl with "build" and "round" added; the bench's other output goes
# to DIR/<round>-<build>.log.
#
# Usage: benches/relay_lag.sh DIR ROUNDS NAME=BINARY [NAME=BINARY ...] -- [bench relay options]
#   DIR      a scratch directory (emptied)
#   ROUNDS   rounds to run; the builds alternate within each round, their order swapped each round
#   KAFKA_LIB (environment) the Apache Kafka jars' directory; scripts/fetch-jars kafka prints it
#   SAME_SERVERS=1 (environment) keeps each round's MariaDB servers for all its runs (Kafka is
#            still fresh for each): a check that `bench relay` runs again on servers it ran on
# Ports used: 33111-33113 (MariaDB), 39092 and 39093 (Kafka).
set -euo pipefail
source "$(dirname "$0")/side_by_side.sh"
lib=${KAFKA_LIB:?set KAFKA_LIB to the Apache Kafka jars directory (scripts/fetch-jars kafka prints it)}
side_by_side_arguments "$@"
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done; done
  pids=()
}
trap stop_all EXIT

mariadb_start() { # N PORT [options]
  local n=$1 port=$2 data="$dir/m$1"
  shift 2
  mariadb-install-db --no-defaults --auth-root-authentication-method=normal \
    --datadir="$data" >"$data.install.log" 2>&1
  mariadbd --no-defaults --user="$(id -un)" --datadir="$data" --port="$port" \
    --socket="$data.sock" --tmpdir="$dir" --bind-address=127.0.0.1 --skip-name-resolve \
    --server-id="$n" --innodb-buffer-pool-size=256M --innodb-log-file-size=8M \
    --log-bin=mariadb-bin --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL \
    --character-set-server=utf8mb4 --log-error="$data.err" "$@" >/dev/null 2>&1 &
  pids+=($!)
}

mariadb_wait() { # PORT
  for _ in $(seq 1 240); do
    mariadb -uroot -h127.0.0.1 -P"$1" -e 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  echo "MariaDB on port $1 did not start: see $dir/m*.err" >&2
  exit 1
}

kafka_start() {
  local k="$dir/kafka"
  mkdir -p "$k"
  cat >"$k/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:39093
listeners=PLAINTEXT://127.0.0.1:39092,CONTROLLER://127.0.0.1:39093
advertised.listeners=PLAINTEXT://127.0.0.1:39092
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$k/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
group.initial.rebalance.delay.ms=0
EOF
  local id
  id=$(java -cp "$lib/*" kafka.tools.StorageTool random-uuid)
  java -cp "$lib/*" kafka.tools.StorageTool format --ignore-formatted "--cluster-id=$id" \
    --config "$k/server.properties" >"$k/format.log" 2>&1
  java -Xms512m -Xmx512m -cp "$lib/*" kafka.Kafka "$k/server.properties" >"$k/server.log" 2>&1 &
  kafka_pid=$!
  pids+=("$kafka_pid")
  for _ in $(seq 1 240); do
    (exec 3<>/dev/tcp/127.0.0.1/39092) 2>/dev/null && break
    sleep 0.25
  done
  java -cp "$lib/*" org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:39092 \
    --create --topic logstamp-bench-a --partitions 1 --replication-factor 1 >"$k/topic.log" 2>&1 \
    || { echo "Kafka did not start: see $k/server.log and $k/topic.log" >&2; exit 1; }
}

for round in $(seq 1 "$rounds"); do
  round_order "$round"
  for build in "${order[@]}"; do
    name=${build%%=*}
    binary=${build#*=}
    rm -rf "$dir/kafka"
    if [ "${SAME_SERVERS:-}" != 1 ] || [ "$build" = "${order[0]}" ]; then
      rm -rf "$dir/m1" "$dir/m2" "$dir/m3"
      mariadb_start 1 33111
      mariadb_start 2 33112
      mariadb_start 3 33113 --log-slave-updates --gtid-domain-id=3
    fi
    kafka_start
    for port in 33111 33112 33113; do mariadb_wait "$port"; done
    echo "round $round: $name (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    "$binary" bench relay --brokers 127.0.0.1:39092 --source mysql://root@127.0.0.1:33111 \
      --target mysql://root@127.0.0.1:33112 --replica mysql://root@127.0.0.1:33113 "${options[@]}" \
      2>"$dir/$round-$name.log" \
      | while IFS= read -r line; do
        case $line in
          "{"*) echo "{\"build\":\"$name\",\"round\":$round,${line#\{}" ;;
        esac
      done >>"$dir/results.jsonl"
    if [ "${SAME_SERVERS:-}" = 1 ]; then
      kill -9 "$kafka_pid"
      while kill -0 "$kafka_pid" 2>/dev/null; do sleep 0.1; done
    else
      stop_all
    fi
  done
  stop_all
done
echo "results: $dir/results.jsonl" >&2
