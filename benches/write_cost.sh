#!/usr/bin/env bash
# The writer's cost side by side for several builds: `logstamp bench storage` (one layout, one
# run) for each build in turn, ROUNDS times, the order reversed every other round, against the
# database of `mysql.url` (each run in a scratch database of its own). One run is short (200,000
# rows write in under a second) and this machine is noisy, so the summary gives, per build, the
# medians of its runs and the median of its ratio to the first build's run of the same round
# (paired: a slow minute slows both).
#
# Usage: benches/write_cost.sh DIR ROUNDS NAME=BINARY [NAME=BINARY ...] -- [bench storage options]
#   DIR     a scratch directory (emptied); each run's JSON line goes to DIR/results.jsonl
#   ROUNDS  rounds to run
# bench storage options default to `--rows 200000 --layouts residual_zlib`; `--runs 1` is added.
# Writing alone is the worker's CPU less its mapping (`worker_us_per_row` less
# `worker_map_us_per_row`).
set -euo pipefail
source "$(dirname "$0")/side_by_side.sh"
side_by_side_arguments "$@"
[ ${#options[@]} -gt 0 ] || options=(--rows 200000 --layouts residual_zlib)
results="$dir/results.jsonl"
for round in $(seq "$rounds"); do
  round_order "$round"
  for build in "${order[@]}"; do
    name=${build%%=*}
    binary=${build#*=}
    echo "round $round: $name" >&2
    "$binary" bench storage --runs 1 "${options[@]}" 2>"$dir/$round-$name.log" | head -1 |
      python3 -c 'import json, sys; j = json.loads(sys.stdin.read()); j["build"] = sys.argv[1]; j["round"] = int(sys.argv[2]); print(json.dumps(j))' "$name" "$round" >>"$results"
  done
done
python3 - "$results" "${builds[0]%%=*}" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    j = json.loads(line)
    j["write_us_per_row"] = round(j["worker_us_per_row"] - j["worker_map_us_per_row"], 2)
    runs[j["build"]][j["round"]] = j
base = sys.argv[2]
keys = ("rows_per_second", "worker_us_per_row", "write_us_per_row", "database_us_per_row")
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
