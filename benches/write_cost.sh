#!/usr/bin/env bash
# The writer's cost side by side for several builds: `logstamp bench storage` (one layout, one
# run) or `logstamp bench ingest` for each build in turn, ROUNDS times, the order reversed every
# other round, against the database of `mysql.url` (each run in a scratch database of its own).
# One run is short (200,000 rows write in under a second) and this machine is noisy, so the
# summary gives, per build, the medians of its runs and the median of its ratio to the first
# build's run of the same round (paired: a slow minute slows both).
#
# Usage: benches/write_cost.sh DIR ROUNDS NAME=BINARY [NAME=BINARY ...] -- [storage|ingest] [options]
#   DIR     a scratch directory (emptied); each run's JSON line goes to DIR/results.jsonl
#   ROUNDS  rounds to run
# `storage` (the default) writes batches mapped beforehand: the writer alone. Its options
# default to `--rows 200000 --layouts residual_zlib`; `--runs 1` is added, and of several
# layouts only the first one's run is taken. Writing alone is the
# worker's CPU less its mapping (`worker_us_per_row` less `worker_map_us_per_row`).
# `ingest` runs `logstamp ingest` workers of the build on a backlog in Kafka (the in-process
# cluster unless `--brokers` is given): the whole worker, consumer and mapping included, and
# its summary's figures are taken.
set -euo pipefail
source "$(dirname "$0")/side_by_side.sh"
side_by_side_arguments "$@"
bench=storage
case "${options[0]:-}" in
  storage | ingest) bench=${options[0]}; options=("${options[@]:1}") ;;
esac
if [ $bench = storage ]; then
  [ ${#options[@]} -gt 0 ] || options=(--rows 200000 --layouts residual_zlib)
  options=(--runs 1 "${options[@]}")
fi
results="$dir/results.jsonl"
for round in $(seq "$rounds"); do
  round_order "$round"
  for build in "${order[@]}"; do
    name=${build%%=*}
    binary=${build#*=}
    echo "round $round: $name" >&2
    "$binary" bench $bench "${options[@]}" 2>"$dir/$round-$name.log" >"$dir/$round-$name.jsonl"
    python3 - "$dir/$round-$name.jsonl" "$bench" "$name" "$round" >>"$results" <<'PY'
import json, sys
path, bench, build, round_ = sys.argv[1:]
lines = [json.loads(line) for line in open(path) if line.startswith("{")]
if bench == "storage":
    # The first layout's run (give one layout with --layouts).
    j = next(line for line in lines if "worker_us_per_row" in line)
    j["write_us_per_row"] = round(j["worker_us_per_row"] - j["worker_map_us_per_row"], 2)
else:
    j = next(line for line in lines if line.get("summary") == "ingest")
    j["database_us_per_row"] = j["database_cpu_us_per_row"]
    j["worker_us_per_row"] = j["worker_cpu_us_per_row"]
j["build"] = build
j["round"] = int(round_)
print(json.dumps(j))
PY
  done
done
python3 - "$results" "${builds[0]%%=*}" "$bench" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    j = json.loads(line)
    runs[j["build"]][j["round"]] = j
base = sys.argv[2]
keys = ["rows_per_second", "worker_us_per_row", "database_us_per_row"]
if sys.argv[3] == "storage":
    keys.insert(2, "write_us_per_row")
print("build | " + " | ".join(f"{k} (median; paired ratio to {base})" for k in keys))
for build, by_round in runs.items():
    cells = []
    for k in keys:
        median = statistics.median(r[k] for r in by_round.values())
        ratio = statistics.median(
            r[k] / runs[base][n][k] for n, r in by_round.items() if n in runs[base]
        )
        cells.append(f"{median:g}; {ratio:.3f}")
    print(f"{build} | " + " | ".join(cells))
PY
