"""kafka-python as someone who can write to a relay topic, and Python's hmac as a check of the relay's signatures.

Usage:
  relay_forge.py produce BOOTSTRAP TOPIC MESSAGES
      MESSAGES is a JSON list of {"value": TEXT, "signature": TEXT} or {"value": TEXT,
      "sign": {"dc": DC, "id": KEY_ID, "secret": SECRET}} or {"value": TEXT} (unsigned).
      Produces each to partition 0 of TOPIC, in order, with the header logstamp-signature as
      given or computed here; prints the offsets as a JSON list.
  relay_forge.py sign TOPIC DC KEY_ID SECRET VALUES
      Prints, as a JSON list, the signature header of each of VALUES (a JSON list of texts) as
      capture publishes it to TOPIC (no key, no other header), computed here as the README's
      "Signed messages" describes.

Any failure raises.
"""

import hashlib
import hmac
import json
import struct
import sys

from kafka import KafkaProducer

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


def signatures(topic, dc, key_id, secret, values):
    print(json.dumps([sign(dc, key_id, secret, topic, v.encode()) for v in values]))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "produce":
        produce(args[0], args[1], json.loads(args[2]))
    elif command == "sign":
        signatures(args[0], args[1], args[2], args[3], json.loads(args[4]))
    else:
        raise SystemExit("unknown command %r" % command)
