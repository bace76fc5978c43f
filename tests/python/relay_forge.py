"""kafka-python as someone who can write to a relay topic, and as a check of the relay's signatures.

Usage:
  relay_forge.py produce BOOTSTRAP TOPIC MESSAGES
      MESSAGES is a JSON list of {"value": TEXT, "signature": TEXT} or {"value": TEXT,
      "sign": {"dc": DC, "id": KEY_ID, "secret": SECRET}} or {"value": TEXT} (unsigned).
      Produces each to partition 0 of TOPIC, in order, with the header logstamp-signature as
      given or computed here; prints the offsets as a JSON list.
  relay_forge.py read BOOTSTRAP TOPIC DC SECRET
      Reads every message of TOPIC and prints a JSON list of {"offset", "value", "signature",
      "expected"}: expected is the signature this script computes with SECRET (data centre DC)
      under the key id the message names, as the README's "Signed relay messages" describes.

Any failure raises.
"""

import hashlib
import hmac
import json
import struct
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

HEADER = "logstamp-signature"
DEADLINE_SECONDS = 60


def field(data):
    if data is None:
        return struct.pack(">Q", 2**64 - 1)
    return struct.pack(">Q", len(data)) + data


def sign(dc, key_id, secret, topic, value, key=None, headers=()):
    covered = [h for h in headers if h[0].startswith("logstamp-") and h[0] != HEADER]
    data = field(b"logstamp-relay-v1") + field(dc.encode()) + field(topic.encode()) + field(key)
    data += struct.pack(">Q", len(covered))
    for name, header_value in covered:
        data += field(name.encode()) + field(header_value)
    data += field(value)
    mac = hmac.new(secret.encode(), data, hashlib.sha256).hexdigest()
    return "%s:%s" % (key_id, mac)


def produce(bootstrap, topic, messages):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    futures = []
    for message in messages:
        value = message["value"].encode()
        signature = message.get("signature")
        if "sign" in message:
            s = message["sign"]
            signature = sign(s["dc"], s["id"], s["secret"], topic, value)
        headers = [(HEADER, signature.encode())] if signature is not None else []
        futures.append(producer.send(topic, value=value, partition=0, headers=headers))
        # One at a time: each lands at the next offset.
        producer.flush()
    offsets = [f.get(timeout=DEADLINE_SECONDS).offset for f in futures]
    producer.close()
    print(json.dumps(offsets))


def read(bootstrap, topic, dc, secret):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    end = consumer.end_offsets([partition])[partition]
    found = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    while len(found) < end:
        if time.monotonic() > deadline:
            raise TimeoutError("read %d of %d messages of %s" % (len(found), end, topic))
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                headers = [(name, value) for name, value in r.headers]
                signatures = [value.decode() for name, value in headers if name == HEADER]
                signature = signatures[0] if len(signatures) == 1 else None
                expected = None
                if signature is not None:
                    key_id = signature.split(":", 1)[0]
                    expected = sign(dc, key_id, secret, topic, r.value, r.key, headers)
                found.append(
                    {
                        "offset": r.offset,
                        "value": r.value.decode(),
                        "signature": signature,
                        "expected": expected,
                    }
                )
    consumer.close()
    print(json.dumps(found))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "produce":
        produce(args[0], args[1], json.loads(args[2]))
    elif command == "read":
        read(*args)
    else:
        raise SystemExit("unknown command %r" % command)
