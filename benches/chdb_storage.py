#!/usr/bin/env python3
"""ClickHouse's bytes per line on disk for the same log lines, the reference line of
`logstamp bench storage` (docs/benchmarks.md, "Storage").

Makes the lines of `logstamp bench storage` (src/ingest/sample.rs's `log_message`, ported:
the same fields, values and text), loads them into chdb (embedded ClickHouse,
`pip install chdb`) as a MergeTree table ordered by a row number, with the columns of
logstamp's default settings and the payload either whole (`full`) or without the fields those
columns hold (`residual`), each column and the payload with ZSTD, merges the parts, and prints
one JSON line per layout: rows, bytes of the table's directory (as `du` counts them) and bytes
per line.
"""

import datetime
import json
import os
import subprocess
import sys
import tempfile

import chdb.session

COLUMNS = ["time", "level", "host", "service", "message"]
LEVELS = ["info", "info", "info", "info", "warn", "error", "debug"]
SERVICES = ["checkout", "search", "auth", "payments", "catalog"]
METHODS = ["GET", "GET", "POST", "PUT"]
STATUSES = [200, 200, 201, 404, 500]
START_MILLIS = 1_714_566_896_000


def log_message(n):
    """Message `n`, as `logstamp bench` makes it (its time n milliseconds after START_MILLIS)."""
    h = (n * 0x9E3779B97F4A7C15) % (1 << 64)
    level = LEVELS[n % len(LEVELS)]
    millis = START_MILLIS + n
    seconds, ms = divmod(millis, 1000)
    at = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    rotated = ((h << 17) | (h >> 47)) % (1 << 64)
    message = {
        "time": at.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms:03d}Z",
        "level": level,
        "host": f"web-{h % 200:03d}.eu-west-1.example.com",
        "service": SERVICES[n % len(SERVICES)],
        "message": f"GET /api/v1/orders/{h % 1_000_000} 200 in {h % 90 + 1}.{h % 10}ms "
                   f"user={h % 50_000} request_id={h:016x} upstream=orders-db-primary",
        "trace_id": f"{h:016x}{rotated:016x}",
        "client": f"10.{h % 256}.{(h >> 8) % 256}.{(h >> 16) % 256}",
    }
    if n % 2 == 0:
        message["http"] = {
            "request": {"method": METHODS[h % 4]},
            "path": f"/api/v1/orders/{h % 1_000}",
            "status": STATUSES[h % 5],
            "latency_ms": h % 90 + 1,
        }
    if level == "error":
        message["error"] = {"code": f"E{h % 40}", "stack": "at orders::handler (src/orders.rs:120)"}
    return message


def du_bytes(path):
    out = subprocess.run(["du", "-s", "--block-size=1", path], check=True, capture_output=True)
    return int(out.stdout.split()[0])


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    documents = [log_message(n) for n in range(count)]
    for layout in ["full", "residual"]:
        with tempfile.TemporaryDirectory() as directory:
            session = chdb.session.Session(directory)
            session.query("CREATE DATABASE bench")
            session.query(
                "CREATE TABLE bench.logs (n UInt64, event_time DateTime64(3) CODEC(ZSTD), "
                "level LowCardinality(String), host String CODEC(ZSTD), "
                "service LowCardinality(String), message String CODEC(ZSTD), "
                "payload String CODEC(ZSTD)) ENGINE = MergeTree ORDER BY n"
            )
            rows = []
            for n, document in enumerate(documents):
                kept = document
                if layout == "residual":
                    kept = {k: v for k, v in document.items() if k not in COLUMNS}
                rows.append(json.dumps({
                    "n": n,
                    "event_time": document["time"].replace("T", " ").rstrip("Z"),
                    "level": document["level"],
                    "host": document["host"],
                    "service": document["service"],
                    "message": document["message"],
                    "payload": json.dumps(kept, separators=(",", ":")),
                }))
            for start in range(0, len(rows), 50_000):
                chunk = "\n".join(rows[start:start + 50_000])
                session.query(f"INSERT INTO bench.logs FORMAT JSONEachRow {chunk}")
            session.query("OPTIMIZE TABLE bench.logs FINAL")
            stored = session.query("SELECT count() FROM bench.logs", "CSV").bytes().decode().strip()
            path = session.query(
                "SELECT data_paths[1] FROM system.tables WHERE database = 'bench' AND name = 'logs'",
                "CSV",
            ).bytes().decode().strip().strip('"')
            size = du_bytes(path if os.path.isabs(path) else os.path.join(directory, path))
            print(json.dumps({
                "layout": f"chdb MergeTree, ZSTD, payload {layout}",
                "rows": int(stored),
                "bytes_on_disk": size,
                "bytes_per_line": round(size / int(stored), 1),
            }))
            session.close()


if __name__ == "__main__":
    main()
