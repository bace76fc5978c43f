"""OTLP logs requests built and serialised by the OpenTelemetry Python packages, for the tests.

Usage: otlp_messages.py OUT_DIR ENCODING MESSAGES RECORDS_PER_MESSAGE

ENCODING is proto (opentelemetry-exporter-otlp-proto-common's encoder, the protobuf bytes of
opentelemetry-proto) or json (opentelemetry-exporter-otlp-json-common's OTLP/JSON encoder).
Writes OUT_DIR/message-N (one ExportLogsServiceRequest each) and OUT_DIR/expected.jsonl: one line
per log record with what was put into it, read from the SDK's own record objects, and where the
encoder placed it (message, record index in the message's resource/scope/record order, read back
with Python's own protobuf or json modules). Record `seq` is numbered from 0 over all messages.

Every 97th record's body is lists nested 32 deep: its document is deeper than MariaDB's JSON
accepts, so that record alone is a dead letter.
"""

import json
import os
import sys

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.json.common._log_encoder import encode_logs as encode_json
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs as encode_proto
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import TraceFlags

BASE_NANOS = 1_795_255_200_000_000_000  # 2026-11-21T10:00:00Z
SEVERITIES = [SeverityNumber.TRACE, SeverityNumber.DEBUG, SeverityNumber.INFO,
              SeverityNumber.WARN, SeverityNumber.ERROR, SeverityNumber.FATAL]


def is_bad(seq):
    return seq % 97 == 42


def record(seq, resource, scope):
    severity = SEVERITIES[seq % len(SEVERITIES)]
    # Every 5th record has no time of its own: its observed time stands in.
    timestamp = None if seq % 5 == 0 else BASE_NANOS + seq * 1_000_003
    observed = BASE_NANOS + seq * 1_000_003 + 777
    # Empty lists and maps: protobuf's JSON writer leaves their `values` out.
    body = ({"event": "checkout", "items": [seq, seq + 0.5], "paid": seq % 2 == 0,
             "none": [], "empty": {}}
            if seq % 4 == 0 else f"request {seq} served \u00e9")
    if is_bad(seq):
        for _ in range(32):
            body = [body]
    traced = seq % 3 != 0
    attributes = {
        "seq": seq,
        "http.status": 200 + seq % 4 * 100,
        "big": 2**62 + seq,
        "ratio": seq / 8,
        # Doubles whose shortest digits some JSON readers round to a neighbour:
        # 878 / 7 is 125.42857142857143.
        "mean": 878 / 7,
        "seventh": seq / 7,
        "none": [],
        "cached": seq % 2 == 1,
        "tags": ["a", f"t{seq % 3}"],
    }
    log = LogRecord(
        timestamp=timestamp,
        observed_timestamp=observed,
        trace_id=(seq * 7_919 + 1) << 64 | seq if traced else None,
        span_id=seq * 104_729 + 1 if traced else None,
        trace_flags=TraceFlags(seq % 2) if traced else None,
        severity_text=severity.name,
        severity_number=severity,
        body=body,
        attributes=attributes,
    )
    readable = ReadableLogRecord(log, resource=resource, instrumentation_scope=scope)
    expected = {
        "seq": seq,
        "time_unix_nano": timestamp or observed,
        "observed_time_unix_nano": observed,
        "severity_number": severity.value,
        "severity_text": severity.name,
        "body": body,
        "trace_id": f"{log.trace_id:032x}" if traced else None,
        "span_id": f"{log.span_id:016x}" if traced else None,
        "flags": int(log.trace_flags) if traced else 0,
        "attributes": attributes,
        # The doubles' shortest digits, compared as text: a reader that rounds them to a
        # neighbour would agree with itself on both sides of a comparison of numbers.
        "double_texts": {key: repr(attributes[key]) for key in ("mean", "seventh")},
        "resource": dict(resource.attributes),
        "scope": {"name": scope.name, "version": scope.version},
        "bad": is_bad(seq),
    }
    return readable, expected


def order_in(encoded, encoding):
    """The seq attribute of each record, in the order the encoded request holds them."""
    seqs = []
    if encoding == "proto":
        request = ExportLogsServiceRequest()
        request.ParseFromString(encoded)
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                for log in scope_logs.log_records:
                    seq = [a.value.int_value for a in log.attributes if a.key == "seq"]
                    seqs.append(seq[0])
    else:
        for resource_logs in json.loads(encoded)["resourceLogs"]:
            for scope_logs in resource_logs["scopeLogs"]:
                for log in scope_logs["logRecords"]:
                    seq = [a["value"]["intValue"] for a in log["attributes"] if a["key"] == "seq"]
                    seqs.append(int(seq[0]))
    return seqs


def main(out_dir, encoding, messages, per_message):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "expected.jsonl"), "w") as expected_file:
        for m in range(messages):
            # Two resources (services) and two scopes per message.
            resources = [
                Resource.create({"service.name": f"svc-{(m + i) % 3}", "host.name": f"host-{i}",
                                 "deployment.environment": "test"})
                for i in range(2)
            ]
            scopes = [InstrumentationScope(f"app.part{i}", f"1.{m}") for i in range(2)]
            batch, expected = [], {}
            for r in range(per_message):
                seq = m * per_message + r
                readable, wanted = record(seq, resources[r % 2], scopes[r // 2 % 2])
                batch.append(readable)
                expected[seq] = wanted
            if encoding == "proto":
                encoded = encode_proto(batch).SerializeToString()
            else:
                encoded = encode_json(batch).to_json().encode()
            with open(os.path.join(out_dir, f"message-{m}"), "wb") as f:
                f.write(encoded)
            for index, seq in enumerate(order_in(encoded, encoding)):
                line = dict(expected.pop(seq), message=m, record=index)
                expected_file.write(json.dumps(line) + "\n")
            assert not expected, f"records missing from message {m}: {sorted(expected)}"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
