"""Client telemetry (KIP-714) with Kafka's own tool and Java client:

- `kafka-client-metrics --alter --name … --metrics … --interval …`
  creates a client-metrics resource (IncrementalAlterConfigs, config
  resource type 16) and `--describe --name …` shows it (DescribeConfigs);
  a bad interval is refused with Kafka's message.
- A Java producer (`enable.metrics.push=true`) matched by the resource
  gets its subscription (GetTelemetrySubscriptions), pushes OTLP metrics
  (PushTelemetry, compressed as it chooses) and they appear on the
  broker's `/metrics` as `moldau_client_metric{client_instance_id,
  client_id,name,attributes}`, named as the client names them
  (`org.apache.kafka.producer.…`), under the instance id the client
  reports (Kafka's base64 form); once it closed they are gone (with its
  terminating push, or 3 push intervals after its last push).

- A librdkafka producer (confluent-kafka) matched by another resource
  pushes too; its metrics appear the same way.

Moldau only for the `/metrics` part (Apache Kafka without an exporter
plugin shows no client metrics).
"""

from __future__ import annotations

import time
import urllib.request

from conftest import unique
from harness import broker as brokers
from harness import kafka_tools


def client_metric_lines(b) -> list[str]:
    with urllib.request.urlopen(f"http://{b.host}:{b.http_port}/metrics", timeout=5) as r:
        page = r.read().decode()
    return [line for line in page.splitlines() if line.startswith("moldau_client_metric{")]


def test_kafka_client_metrics_tool_and_a_java_producer_pushing(broker, new_topic):
    name = unique("producers")
    client_id = unique("telemetry-java")
    bad = kafka_tools.client_metrics(broker.bootstrap, "--alter", "--name", name, "--interval", "50")
    assert bad.returncode != 0, bad.stdout
    assert "interval" in (bad.stdout + bad.stderr), bad.stderr
    p = kafka_tools.client_metrics(
        broker.bootstrap,
        "--alter", "--name", name,
        "--metrics", "org.apache.kafka.producer.",
        "--interval", "1000",
        "--match", f"client_id={client_id}",
    )
    assert p.returncode == 0, p.stderr
    p = kafka_tools.client_metrics(broker.bootstrap, "--describe", "--name", name)
    assert p.returncode == 0, p.stderr
    assert "interval.ms=1000" in p.stdout, p.stdout
    assert "metrics=org.apache.kafka.producer." in p.stdout, p.stdout
    if brokers.target() != "moldau":
        return

    topic = new_topic()
    producer = kafka_tools.telemetry_producer(broker.bootstrap, topic, client_id, 12)
    try:
        first = producer.stdout.readline()
        assert first.startswith("client-instance-id\t"), first + producer.stderr.read()
        instance = first.split("\t")[1].strip()
        deadline = time.monotonic() + 10
        mine: list[str] = []
        while time.monotonic() < deadline and not mine:
            mine = [l for l in client_metric_lines(broker) if f'client_instance_id="{instance}"' in l]
            time.sleep(0.5)
        assert mine, "no pushed metric on /metrics"
        assert all(f'client_id="{client_id}"' in l for l in mine), mine[:3]
        assert all('name="org.apache.kafka.producer.' in l for l in mine), mine[:3]
        out, err = producer.communicate(timeout=60)
        assert producer.returncode == 0, err
        assert "done" in out
    finally:
        if producer.poll() is None:
            producer.kill()
    # closed: its series go with its terminating push, at the latest 3
    # push intervals after its last push
    deadline = time.monotonic() + 8
    while [l for l in client_metric_lines(broker) if instance in l]:
        assert time.monotonic() < deadline, "the closed client's series stayed"
        time.sleep(0.5)
    kafka_tools.client_metrics(broker.bootstrap, "--delete", "--name", name)


def test_a_librdkafka_producer_pushes_its_metrics(broker, new_topic):
    """librdkafka (confluent-kafka) 2.5+ pushes its metrics too, as
    `org.apache.kafka.producer.…` names (KIP-714's), when a resource
    matches it."""
    if brokers.target() != "moldau":
        return
    from confluent_kafka import Producer

    name = unique("rdkafka")
    client_id = unique("telemetry-rd")
    p = kafka_tools.client_metrics(
        broker.bootstrap,
        "--alter", "--name", name,
        "--metrics", "*",
        "--interval", "1000",
        "--match", f"client_id={client_id}",
    )
    assert p.returncode == 0, p.stderr
    topic = new_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "enable.metrics.push": True})
    deadline = time.monotonic() + 15
    mine: list[str] = []
    while time.monotonic() < deadline and not mine:
        producer.produce(topic, b"v")
        producer.poll(0.2)
        mine = [l for l in client_metric_lines(broker) if f'client_id="{client_id}"' in l]
    producer.flush(10)
    assert mine, "no pushed metric on /metrics"
    assert any('name="org.apache.kafka.producer.' in l for l in mine), mine[:3]
    kafka_tools.client_metrics(broker.bootstrap, "--delete", "--name", name)
