"""SASL_PLAINTEXT client listeners (issue 38): a broker of this module's own
whose one listener is SASL_PLAINTEXT, with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 enabled and the users of Kafka's PLAIN JAAS configuration
(`user_admin`, `user_alice`).

- PLAIN: confluent-kafka (librdkafka) as alice produces and consumes records
  round trip; a wrong password, an unknown user and a user known only to
  SCRAM are refused with an authentication error (_AUTHENTICATION, "SASL
  authentication error"); a PLAINTEXT client gets no metadata, neither
  confluent-kafka nor a hand-made Metadata request after ApiVersions (the
  broker closes the connection without an answer).
- SCRAM: Kafka's `kafka-configs` (the Java Admin client) as admin over PLAIN
  creates bob's SCRAM-SHA-256 (8192 iterations) and SCRAM-SHA-512 (default
  4096) credentials (AlterUserScramCredentials), one mechanism a request:
  both in one request alter the user twice, which Kafka refuses
  (DUPLICATE_RESOURCE, nothing stored). `kafka-configs --describe` shows
  both mechanisms, to admin over PLAIN and to bob over SCRAM-SHA-512 (the
  Java client's SCRAM); confluent-kafka as bob round trips records with each
  mechanism; a wrong SCRAM password, and alice (no SCRAM credentials), fail
  with an authentication error; after `--delete-config SCRAM-SHA-256` bob's
  SCRAM-SHA-256 login fails while SCRAM-SHA-512 still works. A SCRAM
  exchange by hand (SaslHandshake v1, SaslAuthenticate v1) gets the server's
  signature right and is then served; a wrong password, and a
  client-final-message whose nonce repeats the client's (as librdkafka
  before 2.6.1 sends it), get SASL_AUTHENTICATION_FAILED and a closed
  connection.
- Kafka's Java console producer and consumer as bob over SCRAM-SHA-512.
- kcat: as alice over PLAIN it produces and consumes, with a wrong password
  it fails. As bob over SCRAM-SHA-512 it depends on kcat's librdkafka:
  before 2.6.1 (Debian's kcat 1.7.1 links 2.0.2) its client-final-message
  repeats the client nonce and Kafka 4 refuses the login (invalid
  credentials); a newer one produces and consumes.

The broker properties are Kafka's names. The broker here has one listener
(`listeners=SASL_PLAINTEXT://…`, Kafka's default
`listener.security.protocol.map`, that listener inter-broker) and accepts,
ignoring them, the inter-broker SASL mechanism and SCRAM JAAS properties
Kafka needs; Apache Kafka (KRaft,
combined mode) also gets its CONTROLLER listener.

Runs against Moldau and Apache Kafka alike (MOLDAU_TEST_TARGET).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import STATE, unique
from harness import broker as brokers
from harness import kafka_tools, kcat, kwire
from harness.clients import RDKAFKA_LOGGER, deliver, metadata_refused, poll_assigned

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
# the broker's PLAIN users (user_*); username/password are Kafka's own
# inter-broker login, which Moldau ignores
BROKER_PLAIN_JAAS = (
    f'{PLAIN_MODULE} required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
BOB_PASSWORD = "bob-secret"


def sasl_properties(host: str, port: int, controller_port: int | None) -> dict[str, str]:
    """The broker properties of a SASL_PLAINTEXT client listener on
    host:port; with `controller_port` (Apache Kafka) also the KRaft
    controller listener and the inter-broker settings Kafka requires."""
    listener = f"SASL_PLAINTEXT://{host}:{port}"
    props = {
        "advertised.listeners": listener,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": BROKER_PLAIN_JAAS,
        # Kafka needs these; Moldau accepts and ignores them
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "connection.failed.authentication.delay.ms": "100",
    }
    if controller_port is None:
        # Moldau: the one listener, Kafka's default protocol map (several
        # listeners on one broker: test_listeners.py)
        props["listeners"] = listener
    else:
        props["listeners"] = f"{listener},CONTROLLER://{host}:{controller_port}"
        props["listener.security.protocol.map"] = "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
    return props


@pytest.fixture(scope="module")
def sasl_broker():
    b = brokers.new_broker(STATE / f"own-test_security-{brokers.target()}")
    controller_port = None
    if b.kind == "kafka":
        controller_port = brokers.free_port(b.host)
        b.env = {"KAFKA_CONTROLLER_PORT": str(controller_port)}
    try:
        brokers.start_with_properties(b, sasl_properties(b.host, b.port, controller_port), "sasl")
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# clients


def sasl_conf(mechanism: str, user: str, password: str) -> dict:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


ALICE = sasl_conf("PLAIN", "alice", "alice-secret")


def bob(mechanism: str, password: str = BOB_PASSWORD) -> dict:
    return sasl_conf(mechanism, "bob", password)


def create_topic(b: brokers.Broker, auth: dict, partitions: int = 1, timeout: float = 30) -> str:
    name = unique("sasl")
    a = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "moldau-e2e-sasl-admin", "logger": RDKAFKA_LOGGER, **auth})
    fs = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)], request_timeout=timeout)
    fs[name].result(timeout)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        t = a.list_topics(name, timeout=10).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return name
        last = t.error if t is not None else "absent"
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not ready within {timeout}s: {last}")


def records(tag: str, n: int = 5) -> list[tuple[bytes, bytes, list]]:
    nonce = uuid.uuid4().hex[:8]
    return [
        (f"{tag}-k{i}".encode(), f"{tag}-v{i}-{nonce}".encode() * (i + 1), [("h", f"{i}".encode())])
        for i in range(n)
    ]


def produce(b: brokers.Broker, auth: dict, topic: str, recs) -> list[int]:
    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 30000,
            "client.id": "moldau-e2e-sasl-producer",
            "logger": RDKAFKA_LOGGER,
            **auth,
        }
    )
    sends = [dict(key=k, value=v, headers=h) for k, v, h in recs]
    offsets, left, errors = deliver(p, topic, 0, sends, 45)
    assert left == 0 and not errors, f"{left} undelivered, errors {errors[:5]}"
    return offsets


def consume(b: brokers.Broker, auth: dict, topic: str, count: int, timeout: float = 30) -> list[tuple]:
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "moldau-e2e-sasl-assign-only",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "client.id": "moldau-e2e-sasl-consumer",
            "logger": RDKAFKA_LOGGER,
            **auth,
        }
    )
    messages = poll_assigned(
        c, topic, 0, 0, count, timeout,
        lambda e: AssertionError(f"consume as {auth.get('sasl.username')}: {e}"),
    )
    out = [(m.offset(), m.key(), m.value(), m.headers() or []) for m in messages]
    assert len(out) == count, f"{len(out)} of {count} records within {timeout}s"
    return out


def round_trip(b: brokers.Broker, auth: dict, topic: str, tag: str) -> None:
    recs = records(tag)
    offsets = produce(b, auth, topic, recs)
    assert offsets == list(range(len(recs))), offsets
    got = consume(b, auth, topic, len(recs))
    assert [(o, k, v, h) for o, k, v, h in got] == [(i, k, v, h) for i, (k, v, h) in enumerate(recs)]


def metadata_error(b: brokers.Broker, auth: dict, timeout: float = 10) -> tuple[KafkaError, list[KafkaError]]:
    """Asks a producer with `auth` for metadata, which must fail: the
    exception's KafkaError and the errors librdkafka reported (error_cb)."""
    e, reported = metadata_refused(
        {"bootstrap.servers": b.bootstrap, "client.id": "moldau-e2e-sasl-refused", **auth},
        lambda r: any(x.code() == KafkaError._AUTHENTICATION for x in r),
        timeout,
    )
    return e.args[0], reported


def assert_authentication_failed(b: brokers.Broker, auth: dict) -> None:
    err, reported = metadata_error(b, auth)
    codes = {err.code(), *(r.code() for r in reported)}
    texts = " | ".join([err.str(), *(r.str() for r in reported)])
    assert KafkaError._AUTHENTICATION in codes, f"no _AUTHENTICATION error: {err.name()} {texts}"
    assert "SASL authentication error" in texts, texts


# ---------------------------------------------------------------------------
# PLAIN


def test_plain_round_trip(sasl_broker):
    topic = create_topic(sasl_broker, ALICE)
    round_trip(sasl_broker, ALICE, topic, "plain")


@pytest.mark.parametrize(
    "auth",
    [
        sasl_conf("PLAIN", "alice", "wrong-secret"),
        sasl_conf("PLAIN", "mallory", "alice-secret"),
        # bob exists only once SCRAM credentials are made, never for PLAIN
        sasl_conf("PLAIN", "bob", BOB_PASSWORD),
    ],
    ids=["wrong-password", "unknown-user", "scram-user"],
)
def test_plain_bad_credentials_refused(sasl_broker, auth):
    assert_authentication_failed(sasl_broker, auth)


def test_plaintext_client_gets_no_metadata(sasl_broker):
    err, _ = metadata_error(sasl_broker, {"security.protocol": "PLAINTEXT"}, timeout=8)
    assert err.code() != KafkaError.NO_ERROR, err

    # the same on the wire: ApiVersions is answered before authentication
    # (clients ask it first), a Metadata request is not: the connection closes
    with kwire.Conn(sasl_broker.host, sasl_broker.port, timeout=10) as c:
        versions = c.api_versions()
        assert versions.error_code == kwire.NONE
        assert kwire.METADATA in versions.versions
        # SaslHandshake (17) and SaslAuthenticate (36) are advertised;
        # SaslHandshake from v0, as Kafka 4 (0..1): librdkafka before 2.x
        # (kcat 1.7.1's 2.0.2) takes a broker without v0 for one without
        # SASL handshake and gives up ("SASL Handshake not supported by broker")
        assert SASL_HANDSHAKE in versions.versions and SASL_AUTHENTICATE in versions.versions, sorted(versions.versions)
        assert versions.versions[SASL_HANDSHAKE][0] == 0, versions.versions[SASL_HANDSHAKE]
        # Metadata v1, all topics (null array)
        c.correlation += 1
        frame = kwire.i16(kwire.METADATA) + kwire.i16(1) + kwire.i32(c.correlation) + kwire.string(c.client_id) + kwire.i32(-1)
        c.send_raw(kwire.i32(len(frame)) + frame)
        assert c.closed_by_peer(wait=10), "the broker neither answered nor closed within 10 s"


# ---------------------------------------------------------------------------
# SCRAM


def command_config(b: brokers.Broker, name: str, mechanism: str, jaas: str) -> str:
    path = b.workdir / f"{name}.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\nsasl.jaas.config={jaas}\n")
    return str(path)


def admin_config(b: brokers.Broker) -> str:
    return command_config(b, "admin", "PLAIN", f'{PLAIN_MODULE} required username="admin" password="admin-secret";')


def bob_config(b: brokers.Broker) -> str:
    return command_config(b, "bob", "SCRAM-SHA-512", f'{SCRAM_MODULE} required username="bob" password="{BOB_PASSWORD}";')


def configs_ok(b: brokers.Broker, config_file: str, *args: str) -> str:
    p = kafka_tools.configs(b.bootstrap, "--command-config", config_file, *args, timeout=90)
    assert p.returncode == 0, f"kafka-configs {args} exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}"
    return p.stdout


def describe_bob(b: brokers.Broker, config_file: str) -> dict[str, int]:
    """`kafka-configs --describe --entity-type users --entity-name bob`: bob's
    SCRAM mechanism → iterations."""
    out = configs_ok(b, config_file, "--describe", "--entity-type", "users", "--entity-name", "bob")
    line = [l for l in out.splitlines() if l.startswith("SCRAM credential configs for user-principal 'bob' are")]
    assert len(line) == 1, out
    return {m: int(i) for m, i in re.findall(r"(SCRAM-SHA-\d+)=iterations=(\d+)", line[0])}


def eventually_round_trip(b: brokers.Broker, auth: dict, topic: str, tag: str, timeout: float = 30) -> None:
    """A round trip as a SCRAM user just created: Kafka applies a credential
    once its metadata record is replayed, so the first login may come early."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = Producer({"bootstrap.servers": b.bootstrap, "logger": RDKAFKA_LOGGER, **auth}).list_topics(timeout=5)
            assert md.brokers
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    round_trip(b, auth, topic, tag)


def alter_user(b: brokers.Broker, user: str, *args: str) -> subprocess.CompletedProcess:
    return kafka_tools.configs(
        b.bootstrap,
        "--command-config",
        admin_config(b),
        "--alter",
        *args,
        "--entity-type",
        "users",
        "--entity-name",
        user,
        timeout=90,
    )


@pytest.fixture(scope="module")
def scram_bob(sasl_broker):
    """bob's SCRAM-SHA-256 and SCRAM-SHA-512 credentials, made by admin
    (PLAIN) with kafka-configs (AlterUserScramCredentials), one mechanism a
    request (one request altering a user twice is refused, see
    test_scram_user_altered_twice_refused)."""
    for spec in (f"SCRAM-SHA-256=[iterations=8192,password={BOB_PASSWORD}]", f"SCRAM-SHA-512=[password={BOB_PASSWORD}]"):
        p = alter_user(sasl_broker, "bob", "--add-config", spec)
        assert p.returncode == 0, f"kafka-configs --add-config {spec} exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}"
        assert "Completed updating config for user bob." in p.stdout, p.stdout
    return "bob"


def test_scram_user_altered_twice_refused(sasl_broker):
    """Both mechanisms in one --add-config are one AlterUserScramCredentials
    request with two upsertions of one user: Kafka (KRaft) refuses the user
    with DUPLICATE_RESOURCE and stores neither."""
    p = alter_user(
        sasl_broker,
        "carol",
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=carol-secret],SCRAM-SHA-512=[password=carol-secret]",
    )
    assert p.returncode == 1, f"exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}"
    assert "DuplicateResourceException: A user credential cannot be altered twice in the same request" in p.stderr, p.stderr[-3000:]
    out = configs_ok(sasl_broker, admin_config(sasl_broker), "--describe", "--entity-type", "users", "--entity-name", "carol")
    assert "SCRAM" not in out, out
    assert_authentication_failed(sasl_broker, sasl_conf("SCRAM-SHA-512", "carol", "carol-secret"))


def test_scram_credentials_described(sasl_broker, scram_bob):
    assert describe_bob(sasl_broker, admin_config(sasl_broker)) == {"SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 4096}
    # bob himself, the Java client over SCRAM-SHA-512
    assert describe_bob(sasl_broker, bob_config(sasl_broker)) == {"SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 4096}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip(sasl_broker, scram_bob, mechanism):
    topic = create_topic(sasl_broker, ALICE)
    eventually_round_trip(sasl_broker, bob(mechanism), topic, mechanism.lower())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_bad_credentials_refused(sasl_broker, scram_bob, mechanism):
    # a good login first, so that the refusals below are not the credentials' absence
    eventually_round_trip(sasl_broker, bob(mechanism), create_topic(sasl_broker, ALICE), "before-" + mechanism.lower())
    assert_authentication_failed(sasl_broker, bob(mechanism, "wrong-secret"))
    # alice is a PLAIN user only: no SCRAM credentials
    assert_authentication_failed(sasl_broker, sasl_conf(mechanism, "alice", "alice-secret"))


SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
SASL_AUTHENTICATION_FAILED = 58


def sasl_authenticate(c: kwire.Conn, auth_bytes: bytes) -> tuple[int, str | None, bytes]:
    """SaslAuthenticate v1: (error code, error message, auth bytes)."""
    _, resp = c.request(SASL_AUTHENTICATE, 1, kwire.nbytes(auth_bytes), False)
    r = kwire.Reader(resp)
    err = r.i16()
    msg = r.string()
    n = r.i32()
    data = b"" if n < 0 else r._take(n)
    r.i64()  # session lifetime
    return err, msg, data


def scram_on_the_wire(b: brokers.Broker, mechanism: str, user: str, password: str, repeat_client_nonce: bool = False):
    """A SCRAM exchange by hand (RFC 5802 over SaslHandshake v1 and
    SaslAuthenticate v1). `repeat_client_nonce`: the client-final-message's
    nonce is the server's nonce followed by the client's again, as
    librdkafka before 2.6.1 sends it (the proof is computed over that
    message, so only the nonce check can refuse it). Returns the final
    SaslAuthenticate's error code and message; on success the server's
    signature is checked and the connection must serve a Metadata request."""
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    with kwire.Conn(b.host, b.port, timeout=10) as c:
        c.api_versions()
        _, resp = c.request(SASL_HANDSHAKE, 1, kwire.string(mechanism), False)
        assert kwire.Reader(resp).i16() == kwire.NONE, resp
        client_nonce = base64.b64encode(os.urandom(18)).decode()
        first_bare = f"n={user},r={client_nonce}"
        err, msg, server_first = sasl_authenticate(c, f"n,,{first_bare}".encode())
        assert err == kwire.NONE, (err, msg)
        attrs = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
        assert attrs["r"].startswith(client_nonce) and len(attrs["r"]) > len(client_nonce), attrs
        nonce = attrs["r"] + client_nonce if repeat_client_nonce else attrs["r"]
        without_proof = f"c=biws,r={nonce}"
        salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        stored_key = hashlib.new(digest, client_key).digest()
        auth_message = f"{first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, digest).digest()
        proof = bytes(x ^ y for x, y in zip(client_key, signature))
        err, msg, server_final = sasl_authenticate(c, f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
        if err != kwire.NONE:
            assert c.closed_by_peer(wait=10), "a refused login must close the connection"
            return err, msg
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
        assert server_final.decode() == f"v={expected}", server_final
        # authenticated: Metadata v1 (all topics) is answered
        _, md = c.request(kwire.METADATA, 1, kwire.i32(-1), False)
        assert kwire.Reader(md).i32() >= 1, "no broker in the Metadata answer"
        return err, msg


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_on_the_wire(sasl_broker, scram_bob, mechanism):
    eventually_round_trip(sasl_broker, bob(mechanism), create_topic(sasl_broker, ALICE), "wire-" + mechanism.lower())
    err, msg = scram_on_the_wire(sasl_broker, mechanism, "bob", BOB_PASSWORD)
    assert err == kwire.NONE and not msg, (err, msg)  # Kafka: message ""
    err, msg = scram_on_the_wire(sasl_broker, mechanism, "bob", "wrong-secret")
    assert err == SASL_AUTHENTICATION_FAILED, (err, msg)
    # the nonce librdkafka < 2.6.1 sends: refused by Kafka 4 (RFC 5802)
    err, msg = scram_on_the_wire(sasl_broker, mechanism, "bob", BOB_PASSWORD, repeat_client_nonce=True)
    assert err == SASL_AUTHENTICATION_FAILED, (err, msg)
    assert msg == f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}", msg


def java_round_trip(b: brokers.Broker, config_file: str, topic: str, tag: str, jvm: tuple[str, ...] = ()) -> None:
    """kafka-console-producer, then kafka-console-consumer (Kafka's Java
    clients) with the client properties of `config_file` (and JVM flags
    `jvm`), on a new topic."""
    lines = [f"k{i}:{tag}-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    p = kafka_tools.run_with_input(
        kafka_tools.CONSOLE_PRODUCER,
        [
            "--bootstrap-server", b.bootstrap,
            "--topic", topic,
            "--producer.config", config_file,
            "--producer-property", "acks=all",
            "--producer-property", "max.block.ms=30000",
            "--producer-property", "delivery.timeout.ms=30000",
            "--property", "parse.key=true",
            "--property", "key.separator=:",
            "--sync",
        ],
        "\n".join(lines) + "\n",
        timeout=90,
        jvm=jvm,
    )
    assert p.returncode == 0 and "ERROR" not in p.stderr, f"console producer exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}"
    c = kafka_tools.run(
        kafka_tools.CONSOLE_CONSUMER,
        [
            "--bootstrap-server", b.bootstrap,
            "--topic", topic,
            "--partition", "0",
            "--offset", "earliest",
            "--max-messages", str(len(lines)),
            "--timeout-ms", "30000",
            "--consumer.config", config_file,
            "--property", "print.offset=true",
            "--property", "print.key=true",
            "--property", "key.separator=:",
        ],
        timeout=90,
        jvm=jvm,
    )
    assert c.returncode == 0, f"console consumer exited {c.returncode}:\n{c.stdout}\n{c.stderr[-3000:]}"
    got = [l for l in c.stdout.splitlines() if l.startswith("Offset:")]
    # offset, key and value, each after key.separator
    assert got == [f"Offset:{i}:{line}" for i, line in enumerate(lines)], c.stdout + c.stderr[-2000:]


def test_java_console_clients_scram_sha_512(sasl_broker, scram_bob):
    """Kafka's Java producer and consumer as bob over SCRAM-SHA-512."""
    java_round_trip(sasl_broker, bob_config(sasl_broker), create_topic(sasl_broker, ALICE), "java-scram")


def kcat_librdkafka() -> tuple[int, ...]:
    out = subprocess.run([kcat.kcat_bin(), "-V"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", out)
    assert m, out
    return tuple(int(x) for x in m.groups())


def kcat_auth(mechanism: str, user: str, password: str) -> list[str]:
    return ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]


def test_kcat_plain(sasl_broker):
    topic = create_topic(sasl_broker, ALICE)
    auth = kcat_auth("PLAIN", "alice", "alice-secret")
    lines = [f"k{i}:kcat-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    kcat.produce_lines(sasl_broker.bootstrap, topic, 0, lines, extra=auth)
    got = kcat.consume(sasl_broker.bootstrap, topic, 0, len(lines), extra=auth)
    assert [r["offset"] for r in got] == list(range(len(lines)))
    assert [(r["key"], r["value"]) for r in got] == [tuple(x.encode() for x in l.split(":", 1)) for l in lines]

    # a wrong password: kcat gives up with librdkafka's authentication error
    with pytest.raises(kcat.KcatError) as e:
        kcat.run(["-L", "-b", sasl_broker.bootstrap, *kcat_auth("PLAIN", "alice", "wrong-secret"), "-m", "3"], timeout=30)
    assert "SASL authentication error: Authentication failed" in str(e.value), str(e.value)


def test_kcat_scram_sha_512(sasl_broker, scram_bob):
    """kcat as bob over SCRAM-SHA-512. librdkafka before 2.6.1 (kcat 1.7.1
    of Debian and Ubuntu links 2.0.2) repeats the client nonce in its
    client-final-message (confluentinc/librdkafka#4895); Kafka 4 checks the
    nonce as RFC 5802 asks and refuses the login as invalid credentials, the
    Java and newer librdkafka clients above log in."""
    topic = create_topic(sasl_broker, ALICE)
    # bob's credentials work (newer librdkafka of confluent-kafka)
    eventually_round_trip(sasl_broker, bob("SCRAM-SHA-512"), topic, "kcat-warmup")
    auth = kcat_auth("SCRAM-SHA-512", "bob", BOB_PASSWORD)
    if kcat_librdkafka() < (2, 6, 1):
        with pytest.raises(kcat.KcatError) as e:
            kcat.run(["-L", "-b", sasl_broker.bootstrap, *auth, "-m", "3"], timeout=30)
        assert "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512" in str(e.value), str(e.value)
        return
    lines = [f"k{i}:kcat-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    kcat.produce_lines(sasl_broker.bootstrap, topic, 0, lines, extra=auth)
    got = kcat.consume(sasl_broker.bootstrap, topic, 0, 5 + len(lines), extra=auth)
    assert [r["offset"] for r in got] == list(range(5 + len(lines)))
    assert [(r["key"], r["value"]) for r in got[5:]] == [tuple(x.encode() for x in l.split(":", 1)) for l in lines]
    with pytest.raises(kcat.KcatError) as e:
        kcat.run(["-L", "-b", sasl_broker.bootstrap, *kcat_auth("SCRAM-SHA-512", "bob", "wrong-secret"), "-m", "3"], timeout=30)
    assert "SASL authentication error" in str(e.value), str(e.value)


def test_delete_scram_mechanism(sasl_broker, scram_bob):
    """Last in the module: removes bob's SCRAM-SHA-256 credential."""
    p = alter_user(sasl_broker, "bob", "--delete-config", "SCRAM-SHA-256")
    assert p.returncode == 0, f"kafka-configs --delete-config exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}"
    assert describe_bob(sasl_broker, admin_config(sasl_broker)) == {"SCRAM-SHA-512": 4096}
    # Kafka drops the credential once its metadata record is replayed
    deadline = time.monotonic() + 30
    while not _refused(sasl_broker, bob("SCRAM-SHA-256")) and time.monotonic() < deadline:
        time.sleep(1)
    assert_authentication_failed(sasl_broker, bob("SCRAM-SHA-256"))
    eventually_round_trip(sasl_broker, bob("SCRAM-SHA-512"), create_topic(sasl_broker, ALICE), "after-delete")


def _refused(b: brokers.Broker, auth: dict) -> bool:
    try:
        Producer({"bootstrap.servers": b.bootstrap, "logger": RDKAFKA_LOGGER, **auth}).list_topics(timeout=5)
        return False
    except KafkaException:
        return True
