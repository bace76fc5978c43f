"""A kafka-python consumer group of one member against `logstamp dev-broker`: how long its joins
take, the first one and a rejoin (after its subscription grows), as a broker answers them.

Usage: kafka_python_rejoin.py BOOTSTRAP TOPIC OTHER_TOPIC GROUP

Subscribes to TOPIC with a 10 s session timeout, waits for its partitions, then subscribes to
TOPIC and OTHER_TOPIC, which makes it join the group again, and waits for OTHER_TOPIC's
partitions too. Then reads one message produced to OTHER_TOPIC and commits it, in the generation
the rejoin gave. Prints one JSON line: the seconds each join took, the partitions assigned, the
message read. Any failure raises.
"""

import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

DEADLINE_SECONDS = 60


def assigned(consumer, topic):
    """Polls until the consumer holds partitions of `topic`; the seconds it took."""
    started = time.monotonic()
    while not any(p.topic == topic for p in consumer.assignment()):
        if time.monotonic() - started > DEADLINE_SECONDS:
            raise TimeoutError(f"no partitions of {topic} within {DEADLINE_SECONDS} s")
        # Long enough for a join: kafka-python 3.0.12 drops a join that completes after a
        # poll's timeout and before the next poll.
        consumer.poll(timeout_ms=500)
    return round(time.monotonic() - started, 3)


def main(bootstrap, topic, other, group):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        session_timeout_ms=10_000,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    consumer.subscribe([topic])
    first = assigned(consumer, topic)
    consumer.subscribe([topic, other])
    rejoin = assigned(consumer, other)

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(other, value=b"after the rejoin", partition=0)
    producer.flush()
    producer.close()
    read = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while "after the rejoin" not in read and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            read.extend(r.value.decode() for r in records if r.topic == other)
    consumer.commit()
    committed = consumer.committed(TopicPartition(other, 0))
    partitions = sorted([p.topic, p.partition] for p in consumer.assignment())
    consumer.close()
    print(json.dumps({"first": first, "rejoin": rejoin, "partitions": partitions,
                      "read": read, "committed": committed}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
