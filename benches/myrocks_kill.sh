#!/usr/bin/env bash
# Is a transaction across InnoDB and MyRocks atomic when mariadbd is killed mid-commit?
#
# The shape of a logstamp batch: a claimed offset row in InnoDB (`off`), and the batch's rows in
# a RocksDB table partitioned by ID range (`logs`), committed together. Six clients commit
# batches of 997 rows as fast as they can; the server is killed with SIGKILL a few seconds in,
# restarted, and every client's offset is compared with its rows (a count and the highest ID).
# A line with "HALF" is a batch half stored: an offset without its rows, or rows without their
# offset. Such a client stays HALF in later rounds (its next batch is refused).
#
# Usage: benches/myrocks_kill.sh DIR PORT ROUNDS [mariadbd options...]
#   DIR     an empty scratch directory (a data directory is installed in it)
#   PORT    a free port for the private server
#   ROUNDS  kills to make
#   options e.g. --log-bin=mb --binlog-format=ROW --server-id=1 (binlog as the coordinator) or
#           none (no binlog: MariaDB coordinates with its tc.log)
# Needs mariadbd, mariadb-install-db, the mariadb client and mariadb-plugin-rocksdb.
set -euo pipefail
dir=$(realpath "$1")
port=$2
rounds=$3
shift 3
client=(mariadb -uroot -h127.0.0.1 -P"$port")

mkdir -p "$dir"
[ -d "$dir/data" ] || mariadb-install-db --no-defaults --auth-root-authentication-method=normal \
  --datadir="$dir/data" >"$dir/install.log" 2>&1

start() {
  mariadbd --no-defaults --user="$(id -un)" --datadir="$dir/data" --port="$port" \
    --socket="$dir/sock" --bind-address=127.0.0.1 --innodb-buffer-pool-size=64M \
    --plugin-load-add=ha_rocksdb --log-error="$dir/error.log" "$@" >/dev/null 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 1 240); do
    "${client[@]}" -e 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "the server did not start: see $dir/error.log" >&2
  exit 1
}

start "$@"
"${client[@]}" -e "
  CREATE DATABASE IF NOT EXISTS k;
  CREATE TABLE IF NOT EXISTS k.off (c INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB;
  CREATE TABLE IF NOT EXISTS k.logs (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, c INT,
    body VARCHAR(500)) ENGINE=ROCKSDB COLLATE=utf8mb4_bin
    PARTITION BY RANGE (id) (PARTITION p1 VALUES LESS THAN (3000000000),
      PARTITION p2 VALUES LESS THAN (6000000000), PARTITION pmax VALUES LESS THAN MAXVALUE);
  INSERT IGNORE INTO k.off VALUES (1,0),(2,0),(3,0),(4,0),(5,0),(6,0);"

first_half=none
for round in $(seq 1 "$rounds"); do
  for c in 1 2 3 4 5 6; do
    # A client stops at its first error (a batch refused after a half-stored one, or the kill).
    (for _ in $(seq 1 100000); do
      echo "START TRANSACTION; SELECT n INTO @n FROM off WHERE c = $c FOR UPDATE;
        INSERT INTO logs SELECT $c * 1000000000 + @n + seq, $c, REPEAT(MD5(seq), 12)
          FROM seq_1_to_997;
        UPDATE off SET n = @n + 997 WHERE c = $c AND n = @n; COMMIT;"
    done | "${client[@]}" k >/dev/null 2>&1 || true) &
  done
  sleep $((4 + round % 5))
  kill -KILL "$(cat "$dir/pid")"
  wait 2>/dev/null || true
  start "$@"
  while IFS=$'\t' read -r c offset rows highest; do
    state=ok
    if [ "$offset" != "$rows" ] || [ "$rows" != "$highest" ]; then
      state=HALF
      [ "$first_half" != none ] || first_half=$round
    fi
    echo "round $round client $c offset $offset rows $rows highest $highest $state"
  done < <("${client[@]}" -N k -e "
    SELECT o.c, o.n, COUNT(l.id), COALESCE(MAX(l.id) - o.c * 1000000000, 0)
    FROM off o LEFT JOIN logs l ON l.id > o.c * 1000000000 AND l.id < (o.c + 1) * 1000000000
    GROUP BY o.c, o.n ORDER BY o.c")
done
"${client[@]}" -e SHUTDOWN
echo "kills: $rounds; first found a batch half stored after kill: $first_half"
