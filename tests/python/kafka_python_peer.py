"""kafka-python (a client that is not librdkafka) as the other side of the Kafka fault tests.

Usage:
  kafka_python_peer.py transactions BOOTSTRAP TOPIC PARTITIONS COUNT
      Produces log lines with sequence numbers 0..COUNT, round-robin over PARTITIONS, in
      transactions of 100 lines; every third transaction is aborted. Prints one JSON line:
      {"committed": [seq, ...], "aborted": [seq, ...]}.
  kafka_python_peer.py read BOOTSTRAP TOPIC
      Reads every partition of TOPIC from its start to its end (read_committed), without a
      group. Prints one JSON line: {"records": [[partition, offset, key, seq or null], ...],
      "ends": {partition: end offset}}; seq is null for a tombstone.

Any failure raises.
"""

import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

DEADLINE_SECONDS = 60
BATCH = 100


def log_line(seq):
    level = ["info", "warn", "error"][seq % 3]
    return json.dumps(
        {
            "seq": seq,
            "time": "2026-11-21T10:00:00.123Z",
            "level": level,
            "host": "host-%d" % (seq % 7),
            "service": "checkout",
            "message": "request %d served" % seq,
        }
    ).encode()


def transactions(bootstrap, topic, partitions, count):
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id="kafka-python-peer",
        enable_idempotence=True,
        acks="all",
    )
    producer.init_transactions()
    committed, aborted = [], []
    for number, start in enumerate(range(0, count, BATCH)):
        seqs = list(range(start, min(start + BATCH, count)))
        producer.begin_transaction()
        for seq in seqs:
            producer.send(topic, value=log_line(seq), partition=seq % partitions)
        if number % 3 == 2:
            producer.abort_transaction()
            aborted.extend(seqs)
        else:
            producer.commit_transaction()
            committed.extend(seqs)
    producer.close()
    print(json.dumps({"committed": committed, "aborted": aborted}))


def read(bootstrap, topic):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    ends = consumer.end_offsets(partitions)
    records = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while any(consumer.position(tp) < ends[tp] for tp in partitions):
        if time.monotonic() > deadline:
            raise TimeoutError("read %d records, not at the end after %ds" % (len(records), DEADLINE_SECONDS))
        for batch in consumer.poll(timeout_ms=500).values():
            for r in batch:
                seq = None if r.value is None else json.loads(r.value)["seq"]
                key = None if r.key is None else r.key.decode()
                records.append([r.partition, r.offset, key, seq])
    consumer.close()
    print(json.dumps({"records": records, "ends": {tp.partition: ends[tp] for tp in partitions}}))


if __name__ == "__main__":
    command, bootstrap, topic = sys.argv[1:4]
    if command == "transactions":
        transactions(bootstrap, topic, int(sys.argv[4]), int(sys.argv[5]))
    elif command == "read":
        read(bootstrap, topic)
    else:
        raise SystemExit("unknown command %r" % command)
