"""kafka-python (a client that is not librdkafka) against `logstamp dev-broker`.

Usage: kafka_python_client.py BOOTSTRAP TOPIC

Creates TOPIC with three partitions through the admin API, produces 30 messages with acks=all
and 10 with acks=0, reads them back in a consumer group, commits, and prints one JSON line:
what it created, read and committed. Any failure raises.
"""

import json
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

DEADLINE_SECONDS = 60


def main(bootstrap, topic):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    try:
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
        refused_again = False
    except TopicAlreadyExistsError:
        refused_again = True
    admin.close()

    sent = []
    for acks, count in (("all", 30), (0, 10)):
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks)
        for _ in range(count):
            n = len(sent)
            producer.send(topic, key=b"k%d" % n, value=json.dumps({"n": n}).encode())
            sent.append(n)
        producer.flush()
        producer.close()

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id="kafka-python",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    partitions = sorted(consumer.partitions_for_topic(topic) or [])
    read = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while len(read) < len(sent) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            read.extend(json.loads(r.value)["n"] for r in records)
    consumer.commit()
    committed = sum(
        consumer.committed(TopicPartition(topic, p)) or 0 for p in partitions
    )
    consumer.close()
    print(
        json.dumps(
            {
                "partitions": partitions,
                "created_twice_refused": refused_again,
                "read": sorted(read),
                "committed": committed,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
