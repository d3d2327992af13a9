"""SASL OAUTHBEARER (issue 38, KIP-768) with real clients, against Moldau
and Apache Kafka alike (MOLDAU_TEST_TARGET).

Two brokers of this module's own, each with one SASL_PLAINTEXT client
listener offering OAUTHBEARER (Kafka also gets a PLAINTEXT listener for
its inter-broker and controller traffic):

- `jwks_broker`: Kafka's validating handler
  (`OAuthBearerValidatorCallbackHandler`) over a JWKS *file*
  (`sasl.oauthbearer.jwks.endpoint.url=file://…`; Kafka 4.4 also needs
  the URL in the JVM's `org.apache.kafka.sasl.oauthbearer.allowed.urls`),
  with the expected audience and issuer. The identity provider is this
  test: an RSA key made with `openssl`, its JWK in the file, RS256 tokens
  signed with `openssl dgst`.
  - confluent-kafka (librdkafka) hands a signed token from its `oauth_cb`
    and round trips records;
  - a token signed by another key, an expired one, and one for another
    audience are refused: librdkafka reports an authentication error
    whose text carries Kafka's `{"status":"invalid_token"}`;
  - Kafka's Java console producer and consumer read their token from a
    file (`OAuthBearerLoginCallbackHandler` with
    `sasl.oauthbearer.token.endpoint.url=file://…`) and round trip.
- `unsecured_broker`: no handler configured, which is Kafka's unsecured
  default: librdkafka's built-in unsecured token
  (`sasl.oauthbearer.config=principal=…`) round trips records.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import STATE, unique
from harness import broker as brokers
from test_security import java_round_trip

AUDIENCE = "moldau-e2e"
ISSUER = "https://idp.e2e.test"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class RsaIssuer:
    """An identity provider's signing key, made and used with openssl."""

    def __init__(self, directory: Path, kid: str):
        self.kid = kid
        self.key = directory / f"{kid}.pem"
        subprocess.run(
            ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(self.key)],
            check=True, capture_output=True,
        )
        modulus = subprocess.run(
            ["openssl", "rsa", "-in", str(self.key), "-noout", "-modulus"], check=True, capture_output=True, text=True
        ).stdout.strip().split("=", 1)[1]
        self.jwk = {
            "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
            "n": b64url(bytes.fromhex(modulus)), "e": b64url((65537).to_bytes(3, "big")),
        }

    def token(self, sub: str, valid_s: int = 300, **overrides) -> str:
        now = int(time.time())
        claims = {"sub": sub, "iat": now - 5, "exp": now + valid_s, "aud": AUDIENCE, "iss": ISSUER, "scope": "kafka"}
        claims.update(overrides)
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)],
            input=signing_input.encode(), check=True, capture_output=True,
        ).stdout
        return f"{signing_input}.{b64url(signature)}"


def listener_properties(b: brokers.Broker, extra: dict[str, str]) -> dict[str, str]:
    """A SASL_PLAINTEXT listener offering OAUTHBEARER on b's port; Kafka
    also gets a PLAINTEXT listener for its own traffic."""
    client = f"SASL_PLAINTEXT://{b.host}:{b.port}"
    props = {
        "advertised.listeners": client,
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        # Kafka's broker logs in too: an unsecured token of its own
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="broker";',
        "connection.failed.authentication.delay.ms": "100",
        **extra,
    }
    if b.kind == "moldau":
        props["listeners"] = client
    else:
        inter, controller = brokers.free_port(b.host), brokers.free_port(b.host)
        b.env = {**(b.env or {}), "KAFKA_CONTROLLER_PORT": str(controller)}
        props["listeners"] = f"{client},BROKER://{b.host}:{inter},CONTROLLER://{b.host}:{controller}"
        props["advertised.listeners"] = f"{client},BROKER://{b.host}:{inter}"
        props["listener.security.protocol.map"] = "SASL_PLAINTEXT:SASL_PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT"
        props["inter.broker.listener.name"] = "BROKER"
    return props


def own_broker(name: str, props_of) -> brokers.Broker:
    b = brokers.new_broker(STATE / f"own-test_oauthbearer-{name}-{brokers.target()}")
    try:
        brokers.start_with_properties(b, props_of(b), name)
    except Exception:
        b.close(keep=True)
        raise
    return b


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    d = tmp_path_factory.mktemp("idp")
    issuer = RsaIssuer(d, "k1")
    jwks = d / "jwks.json"
    jwks.write_text(json.dumps({"keys": [issuer.jwk]}))
    return issuer, jwks


@pytest.fixture(scope="module")
def jwks_broker(idp):
    _, jwks = idp
    url = f"file://{jwks}"

    def props(b):
        if b.kind == "kafka":
            b.env = {**(b.env or {}), "KAFKA_OPTS": f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={url}"}
        return listener_properties(b, {
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "sasl.oauthbearer.jwks.endpoint.url": url,
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER,
        })

    b = own_broker("jwks", props)
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def unsecured_broker():
    b = own_broker("unsecured", lambda b: listener_properties(b, {}))
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


def oauth_config(b: brokers.Broker, token_of) -> dict:
    """confluent-kafka's settings: OAUTHBEARER with tokens from `token_of()`."""
    return {
        "bootstrap.servers": b.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": lambda _config: (token_of(), time.time() + 240),
    }


def round_trip(config: dict, topic: str, count: int = 5) -> list[bytes]:
    a = AdminClient(config)
    a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    p = Producer({**config, "acks": "all"})
    sent = [f"{topic}-{i}".encode() for i in range(count)]
    for v in sent:
        p.produce(topic, v)
    assert p.flush(30) == 0
    c = Consumer({**config, "group.id": unique("oauth-g"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.time() + 30
    while len(got) < count and time.time() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == sent
    return got


def refusal(config: dict) -> str:
    """The authentication error librdkafka reports for `config`."""
    errors: list[str] = []
    p = Producer({**config, "error_cb": lambda e: errors.append(f"{e.code()}: {e.str()}"), "socket.timeout.ms": 5000})
    deadline = time.time() + 20
    while not any("uthentication" in e for e in errors) and time.time() < deadline:
        p.poll(0.5)
    with pytest.raises(KafkaException):
        p.list_topics(timeout=3)
    return " | ".join(errors)


def test_a_signed_token_round_trips_records(jwks_broker, idp):
    issuer, _ = idp
    round_trip(oauth_config(jwks_broker, lambda: issuer.token("alice")), unique("oauth-signed"))


@pytest.mark.parametrize("why", ["another key", "expired", "another audience"])
def test_bad_tokens_are_refused_with_kafkas_status(jwks_broker, idp, tmp_path, why):
    issuer, _ = idp
    if why == "another key":
        token = RsaIssuer(tmp_path, "k1").token("mallory")
    elif why == "expired":
        token = issuer.token("alice", valid_s=-120, iat=int(time.time()) - 300)
    else:
        token = issuer.token("alice", aud="elsewhere")
    errors = refusal(oauth_config(jwks_broker, lambda: token))
    assert "invalid_token" in errors, errors


def test_java_clients_read_their_token_from_a_file(jwks_broker, idp, tmp_path):
    issuer, _ = idp
    token_file = tmp_path / "token.jwt"
    token_file.write_text(issuer.token("java-app"))
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        f"sasl.jaas.config={OAUTH_MODULE} required ;\n"
        f"sasl.login.callback.handler.class={LOGIN_HANDLER}\n"
        f"sasl.oauthbearer.token.endpoint.url=file://{token_file}\n"
    )
    topic = unique("oauth-java")
    admin = AdminClient(oauth_config(jwks_broker, lambda: issuer.token("admin")))  # alive until done
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    allowed = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=file://{token_file}"
    java_round_trip(jwks_broker, str(config), topic, "java-oauth", jvm=(allowed,))


def test_librdkafkas_unsecured_token_on_kafkas_default_validator(unsecured_broker):
    config = {
        "bootstrap.servers": unsecured_broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.config": f"principal=dev-{uuid.uuid4().hex[:6]} scope=kafka",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
    }
    round_trip(config, unique("oauth-unsecured"))
