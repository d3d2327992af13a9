"""SSL client listeners (issue 38): a broker of this module's own whose one
client listener is SSL (`listeners=SSL://…`) with a PEM keystore (key and
chain in one file) and a PEM truststore, `ssl.client.auth=requested`, and
certificates made at test time with the `openssl` command (a CA, the
broker's certificate for 127.0.0.1, a client certificate
`CN=alice,OU=eng,O=acme`, and a second CA that the broker does not trust).

- confluent-kafka (librdkafka) with `security.protocol=SSL` and
  `ssl.ca.location` produces and consumes records round trip, without a
  client certificate and with one (mTLS);
- a client that does not trust the broker's CA gets no metadata (the
  handshake fails); a client whose certificate another CA signed is
  refused in the handshake — shown with Python's OpenSSL client, which
  presents its certificate: librdkafka, given that certificate, was
  answered as a client without one (it did not present it to a broker
  whose certificate request names only the broker's CA);
- a PLAINTEXT client on the SSL port gets no metadata either;
- on a second broker whose listener is SASL_SSL, confluent-kafka
  authenticates with PLAIN over TLS and round trips records; a wrong
  password is refused;
- other clients over SSL: Kafka's Java console producer and consumer (a
  PEM truststore, and with a PEM keystore for mTLS), kafka-python
  (`ssl_cafile`) and kcat round trip records; the Java clients over
  SASL_SSL with PLAIN too.

Also runs against Apache Kafka 4.4 (`MOLDAU_TEST_TARGET=kafka`) with the
same PEM files and settings; Kafka gets two more listeners for its own
traffic (a PLAINTEXT inter-broker one and its controller's).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import STATE, unique
from harness import broker as brokers
from harness import kafka_tools, kcat, kwire
from harness.clients import RDKAFKA_LOGGER, metadata_refused


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
        cwd=d,
    )


def issue(d: Path, ca: str, name: str, subject: str, san: str | None) -> None:
    """`name.key` and `name.crt` signed by `ca`."""
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
        cwd=d,
    )
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", ext.name,
        cwd=d,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    d = tmp_path_factory.mktemp("tls")
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    issue(d, "ca", "broker", "/CN=broker", "IP:127.0.0.1,DNS:localhost")
    issue(d, "ca", "alice", "/O=acme/OU=eng/CN=alice", None)
    issue(d, "other-ca", "mallory", "/O=acme/CN=mallory", None)
    # Kafka's PEM keystore file: the key and the chain in one file
    (d / "broker.pem").write_text((d / "broker.key").read_text() + (d / "broker.crt").read_text())
    return d


def wait_tls(b: brokers.Broker, ca: Path, deadline: float) -> None:
    """The harness waits for ApiVersions in plaintext; here over TLS."""
    context = ssl.create_default_context(cafile=str(ca))
    last = None
    while time.monotonic() < deadline:
        try:
            with kwire.Conn(b.host, b.port, timeout=5) as c:
                c.sock = context.wrap_socket(c.sock, server_hostname=b.host)
                c.api_versions()
            return
        except (OSError, kwire.ProtocolError) as e:
            last = e
            time.sleep(0.2)
    raise AssertionError(f"no ApiVersions over TLS on {b.bootstrap}: {last}")


def own_listeners(b: brokers.Broker, props: dict[str, str], protocol: str) -> dict[str, str]:
    """`props` name one client listener of `protocol` on b's port. Moldau
    serves everything there; a Kafka node also needs a PLAINTEXT listener
    for its inter-broker traffic and one for its controller."""
    if b.kind == "moldau":
        return props
    inter, controller = brokers.free_port(b.host), brokers.free_port(b.host)
    b.env = {**(b.env or {}), "KAFKA_CONTROLLER_PORT": str(controller)}
    return {
        **props,
        "listeners": f"{props['listeners']},BROKER://{b.host}:{inter},CONTROLLER://{b.host}:{controller}",
        "advertised.listeners": f"{props['advertised.listeners']},BROKER://{b.host}:{inter}",
        "listener.security.protocol.map": f"{protocol}:{protocol},BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
    }


@pytest.fixture(scope="module")
def tls_broker(pki):
    b = brokers.new_broker(STATE / f"own-test_tls-{brokers.target()}")
    b._wait_kafka_port = lambda deadline: wait_tls(b, pki / "ca.pem", deadline)
    props = {
        "listeners": f"SSL://{b.host}:{b.port}",
        "advertised.listeners": f"SSL://{b.host}:{b.port}",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.pem"),
        "ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=eng,O=acme$/$1/,DEFAULT",
    }
    try:
        brokers.start_with_properties(b, own_listeners(b, props, "SSL"), "tls")
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def sasl_ssl_broker(pki):
    b = brokers.new_broker(STATE / f"own-test_tls-sasl-{brokers.target()}")
    b._wait_kafka_port = lambda deadline: wait_tls(b, pki / "ca.pem", deadline)
    props = {
        "listeners": f"SASL_SSL://{b.host}:{b.port}",
        "advertised.listeners": f"SASL_SSL://{b.host}:{b.port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret";'
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "broker.pem"),
    }
    try:
        brokers.start_with_properties(b, own_listeners(b, props, "SASL_SSL"), "sasl-ssl")
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


def ssl_conf(pki: Path, client: str | None = None, ca: str = "ca") -> dict:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki / f"{ca}.pem")}
    if client is not None:
        conf["ssl.certificate.location"] = str(pki / f"{client}.crt")
        conf["ssl.key.location"] = str(pki / f"{client}.key")
    return conf


def create_topic(b: brokers.Broker, auth: dict, timeout: float = 30) -> str:
    name = unique("tls")
    a = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "moldau-e2e-tls-admin", "logger": RDKAFKA_LOGGER, **auth})
    fs = a.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)], request_timeout=timeout)
    fs[name].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = a.list_topics(name, timeout=10).topics.get(name)
        if t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
            return name
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not ready within {timeout}s")


def round_trip(b: brokers.Broker, auth: dict, tag: str, n: int = 50) -> None:
    topic = create_topic(b, auth)
    nonce = uuid.uuid4().hex[:8]
    # values large enough that the fetch reads them back from the segment
    # through the TLS session in several records
    recs = [(f"{tag}-k{i}".encode(), f"{tag}-v{i}-{nonce}".encode() * 400) for i in range(n)]
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5, "client.id": "moldau-e2e-tls-producer", "logger": RDKAFKA_LOGGER, **auth})
    errors: list[str] = []
    for k, v in recs:
        p.produce(topic, key=k, value=v, partition=0, on_delivery=lambda err, _m: err and errors.append(str(err)))
        p.poll(0)
    assert p.flush(45) == 0 and not errors, errors[:5]
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "moldau-e2e-tls", "enable.auto.commit": False, "client.id": "moldau-e2e-tls-consumer", "logger": RDKAFKA_LOGGER, **auth})
    got = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.key(), m.value()))
    finally:
        c.close()
    assert got == recs


def refused(b: brokers.Broker, auth: dict, timeout: float = 8) -> None:
    """A client with `auth` never gets metadata (any refusal reported)."""
    metadata_refused(
        {"bootstrap.servers": b.bootstrap, "client.id": "moldau-e2e-tls-refused", **auth}, bool, timeout
    )


def test_ssl_round_trip_without_a_client_certificate(tls_broker, pki):
    round_trip(tls_broker, ssl_conf(pki), "ssl")


def test_mtls_round_trip_with_a_client_certificate(tls_broker, pki):
    round_trip(tls_broker, ssl_conf(pki, client="alice"), "mtls")


def test_a_client_that_does_not_trust_the_broker_gets_nothing(tls_broker, pki):
    refused(tls_broker, ssl_conf(pki, ca="other-ca"))


def test_a_certificate_of_another_ca_is_refused(tls_broker, pki):
    # by hand: Python's OpenSSL client shows its certificate whatever CAs
    # the broker names in its certificate request
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.load_cert_chain(str(pki / "mallory.crt"), str(pki / "mallory.key"))
    with pytest.raises((OSError, kwire.ProtocolError)):
        with kwire.Conn(tls_broker.host, tls_broker.port, timeout=5) as c:
            c.sock = context.wrap_socket(c.sock, server_hostname=tls_broker.host)
            c.api_versions()


def test_a_plaintext_client_on_the_ssl_port_gets_nothing(tls_broker):
    refused(tls_broker, {"security.protocol": "PLAINTEXT"})
    # nor does a hand-made ApiVersions
    with pytest.raises((OSError, kwire.ProtocolError)):
        with kwire.Conn(tls_broker.host, tls_broker.port, timeout=5) as c:
            c.api_versions()


def sasl_ssl_conf(pki: Path, password: str) -> dict:
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki / "ca.pem"),
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": password,
    }


def test_sasl_plain_over_tls_round_trip(sasl_ssl_broker, pki):
    round_trip(sasl_ssl_broker, sasl_ssl_conf(pki, "alice-secret"), "sasl-ssl")


def test_sasl_over_tls_refuses_a_wrong_password(sasl_ssl_broker, pki):
    refused(sasl_ssl_broker, sasl_ssl_conf(pki, "wrong"))


# -- other clients ------------------------------------------------------------


def java_round_trip(b: brokers.Broker, pki: Path, admin: dict, props: dict[str, str], tag: str) -> None:
    """Kafka's Java console producer then consumer with client `props`, on
    a topic confluent-kafka creates with `admin`'s settings."""
    topic = create_topic(b, admin)
    config = pki / f"{tag}.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    lines = [f"k{i}:{tag}-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    p = kafka_tools.run_with_input(
        kafka_tools.CONSOLE_PRODUCER,
        [
            "--bootstrap-server", b.bootstrap, "--topic", topic, "--producer.config", str(config),
            "--producer-property", "acks=all", "--producer-property", "max.block.ms=30000",
            "--property", "parse.key=true", "--property", "key.separator=:", "--sync",
        ],
        "\n".join(lines) + "\n",
        timeout=90,
    )
    assert p.returncode == 0 and "ERROR" not in p.stderr, f"console producer exited {p.returncode}:\n{p.stderr[-3000:]}"
    c = kafka_tools.run(
        kafka_tools.CONSOLE_CONSUMER,
        [
            "--bootstrap-server", b.bootstrap, "--topic", topic, "--partition", "0", "--offset", "earliest",
            "--max-messages", str(len(lines)), "--timeout-ms", "30000", "--consumer.config", str(config),
            "--property", "print.key=true", "--property", "key.separator=:",
        ],
        timeout=90,
    )
    assert c.returncode == 0, f"console consumer exited {c.returncode}:\n{c.stderr[-3000:]}"
    assert [l for l in c.stdout.splitlines() if l.startswith("k")] == lines, c.stdout + c.stderr[-2000:]


def test_java_clients_over_ssl_and_mtls(tls_broker, pki):
    base = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki / "ca.pem")}
    java_round_trip(tls_broker, pki, ssl_conf(pki), base, "java-ssl")
    # mTLS: a PEM keystore of the client's key (PKCS#8, as Java reads it)
    # and certificate
    openssl("pkcs8", "-topk8", "-nocrypt", "-in", "alice.key", "-out", "alice.pk8", cwd=pki)
    (pki / "alice.pem").write_text((pki / "alice.pk8").read_text() + (pki / "alice.crt").read_text())
    mtls = {**base, "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki / "alice.pem")}
    java_round_trip(tls_broker, pki, ssl_conf(pki), mtls, "java-mtls")


def test_java_clients_over_sasl_ssl(sasl_ssl_broker, pki):
    props = {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.pem"),
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";',
    }
    java_round_trip(sasl_ssl_broker, pki, sasl_ssl_conf(pki, "alice-secret"), props, "java-sasl-ssl")


def test_kafka_python_over_ssl(tls_broker, pki):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTopicPartition

    topic = create_topic(tls_broker, ssl_conf(pki))
    ssl_args = {"security_protocol": "SSL", "ssl_cafile": str(pki / "ca.pem")}
    values = [f"kp-{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(5)]
    p = KafkaProducer(bootstrap_servers=tls_broker.bootstrap, acks="all", **ssl_args)
    try:
        for v in values:
            p.send(topic, value=v, partition=0).get(timeout=30)
    finally:
        p.close()
    c = KafkaConsumer(bootstrap_servers=tls_broker.bootstrap, consumer_timeout_ms=15000, **ssl_args)
    try:
        tp = KTopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = [m.value for m in c][: len(values)]
    finally:
        c.close()
    assert got == values


def test_kcat_over_ssl(tls_broker, pki):
    topic = create_topic(tls_broker, ssl_conf(pki))
    auth = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki / 'ca.pem'}"]
    lines = [f"k{i}:kcat-tls-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    kcat.produce_lines(tls_broker.bootstrap, topic, 0, lines, extra=auth)
    got = kcat.consume(tls_broker.bootstrap, topic, 0, len(lines), extra=auth)
    assert [(r["key"], r["value"]) for r in got] == [tuple(x.encode() for x in l.split(":", 1)) for l in lines]
