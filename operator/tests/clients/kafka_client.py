"""A Kafka client for the operator's end-to-end tests: confluent-kafka
(librdkafka) from the repository's venv, run inside the test's network
namespace. Not kcat: Debian's kcat links librdkafka 2.0.2, whose SCRAM
client-final-message Kafka 4 (and Moldau) refuse.

    kafka_client.py CONFIG_JSON produce TOPIC FILE   # one record per line, acks=all
    kafka_client.py CONFIG_JSON consume TOPIC GROUP COUNT
    kafka_client.py CONFIG_JSON metadata
    kafka_client.py CONFIG_JSON produce-until TOPIC STOP_FILE LABEL
        # a record ("<LABEL>-<i>") every 20 ms, idempotent with acks=all, until
        # STOP_FILE exists; prints {"delivered": N, "failed": [...],
        # "errors": [...]} (errors: the client's own, retriable or not)

Exit 0 on success (consume prints the values, one per line); otherwise 1,
with every error the client met on stderr.
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer

errors = []


def on_error(err):
    errors.append(str(err))


def fail(what):
    print(what, file=sys.stderr)
    for e in errors:
        print(e, file=sys.stderr)
    sys.exit(1)


def main():
    conf = json.loads(sys.argv[1])
    conf["error_cb"] = on_error
    op = sys.argv[2]
    if op == "produce":
        topic, path = sys.argv[3], sys.argv[4]
        producer = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
        failed = []

        def delivered(err, _msg):
            if err is not None:
                failed.append(str(err))

        with open(path) as f:
            for line in f.read().splitlines():
                producer.produce(topic, line.encode(), on_delivery=delivered)
        if producer.flush(30) != 0:
            fail("records left undelivered")
        if failed:
            errors.extend(failed)
            fail(f"{len(failed)} records not delivered")
    elif op == "consume":
        topic, group, count = sys.argv[3], sys.argv[4], int(sys.argv[5])
        consumer = Consumer(
            {
                **conf,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
            }
        )
        consumer.subscribe([topic])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(str(msg.error()))
                if not msg.error().retriable():
                    break
                continue
            values.append(msg.value().decode())
        consumer.close()
        if len(values) < count:
            fail(f"read {len(values)} of {count} records")
        print("\n".join(values))
    elif op == "produce-until":
        import os

        topic, stop, label = sys.argv[3], sys.argv[4], sys.argv[5]
        producer = Producer(
            {
                **conf,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 120000,
            }
        )
        delivered = []
        failed = []

        def delivered_cb(err, msg):
            if err is None:
                delivered.append(msg.value().decode())
            else:
                failed.append(str(err))

        i = 0
        while not os.path.exists(stop):
            producer.produce(topic, f"{label}-{i}".encode(), on_delivery=delivered_cb)
            i += 1
            producer.poll(0.02)
        left = producer.flush(120)
        print(json.dumps({"produced": i, "delivered": len(delivered), "undelivered": left,
                          "failed": failed, "errors": errors}))
        if failed or left:
            sys.exit(1)
    elif op == "metadata":
        producer = Producer(conf)
        try:
            producer.list_topics(timeout=10)
        except KafkaException as e:
            fail(f"metadata: {e}")
    else:
        fail(f"unknown operation {op}")


main()
