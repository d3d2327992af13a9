//! The server side of SASL SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802,
//! RFC 7677) as Kafka serves them (KIP-84), as a pure state machine over
//! bytes: no I/O, no clock, no broker types.
//!
//! This module owns:
//!
//! - [`ScramMechanism`]: the two mechanisms, with Kafka's names, the ids of
//!   DescribeUserScramCredentials/AlterUserScramCredentials and the
//!   iteration bounds Kafka enforces;
//! - [`ScramCredential`]: what a broker stores for a user (salt, StoredKey,
//!   ServerKey, iterations), derived from a salted password (what
//!   AlterUserScramCredentials carries) or a password, and its text form,
//!   compatible with Kafka's `ScramCredentialUtils`;
//! - [`ScramServer`]: one authentication exchange — client-first →
//!   server-first → client-final → server-final — over a caller-supplied
//!   [`CredentialLookup`];
//! - [`ScramError`]: why an exchange failed, and the message a Kafka client
//!   sees for it ([`ScramError::client_message`]).
//!
//! Wiring into SaslHandshake/SaslAuthenticate and storing credentials in
//! cluster metadata belong to the callers.
//!
//! # Unknown users
//!
//! Kafka refuses an unknown user at the client-first message; here an
//! unknown user is answered exactly like a known one — a server-first
//! message whose salt and iteration count come from a fake credential
//! derived from the username and a server secret, so the same name gets
//! the same salt every time — and fails at the proof, with the same error
//! and message as a wrong password. Give every broker of a cluster the same
//! secret ([`ScramServer::with_unknown_user_secret`]) so that a fake salt
//! is also the same on every broker and across restarts; without one, a
//! random per-process secret is used.
//!
//! # Deliberate differences from Kafka
//!
//! - the gs2 flag `y` (client supports channel binding, thinks the server
//!   does not) is accepted, as RFC 5802 requires of a server without
//!   channel binding; `p=` is refused;
//! - the channel binding `c=` of the client-final message must be the
//!   base64 of the gs2 header the client sent (`biws` for `n,,`); Kafka
//!   does not check it;
//! - the AuthMessage is built from the bytes the client sent, as the RFC
//!   says (Kafka rebuilds it from the parsed fields, which is the same for
//!   its own client);
//! - usernames may be any UTF-8 (Kafka's grammar takes ASCII only); the
//!   authzid is unescaped (`=2C`, `=3D`) before being compared with the
//!   username; a mandatory extension (`m=`) is refused (Kafka ignores it);
//! - no SASLprep of the password (Kafka does none either).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// The largest client message accepted, in bytes. Kafka's own client-first
/// messages are well under 200 bytes (a delegation token id as username
/// included), its client-final messages under 250.
pub const MAX_CLIENT_MESSAGE_LEN: usize = 4096;

/// The most extensions a client-first message may carry.
pub const MAX_EXTENSIONS: usize = 16;

/// The client-first extension with which a client authenticates with a
/// delegation token (the username is then the token id).
pub const TOKEN_AUTH_EXTENSION: &str = "tokenauth";

/// Kafka's message when a client asks for an authorization id other than
/// its username (SCRAM and PLAIN alike).
pub const AUTHORIZATION_ID_MISMATCH_MESSAGE: &str =
    "Authentication failed: Client requested an authorization id that is different from username";

/// Kafka's message for a failed exchange whose mechanism raised a plain
/// `SaslException` (`SaslServerAuthenticator.handleSaslToken`): it names
/// the phase and the mechanism and nothing else, so that it cannot tell
/// whether the user exists.
pub fn invalid_credentials_message(mechanism_name: &str, reauthentication: bool) -> String {
    let phase = if reauthentication {
        "re-authentication"
    } else {
        "authentication"
    };
    format!(
        "Authentication failed during {phase} due to invalid credentials with SASL mechanism {mechanism_name}"
    )
}

/// A SCRAM mechanism Kafka serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    /// Both mechanisms, in id order.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The fewest iterations Kafka accepts (for both mechanisms).
    pub const MIN_ITERATIONS: u32 = 4096;
    /// The most iterations Kafka accepts in AlterUserScramCredentials.
    pub const MAX_ITERATIONS: u32 = 16384;

    /// The SASL mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism a SASL mechanism name names (case-sensitive, as in
    /// Kafka).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The `mechanism` field of DescribeUserScramCredentials and
    /// AlterUserScramCredentials (0 is Kafka's UNKNOWN).
    pub fn id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism of a wire id; `None` for 0 (UNKNOWN) and anything else.
    pub fn from_id(id: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.id() == id)
    }

    pub fn min_iterations(self) -> u32 {
        Self::MIN_ITERATIONS
    }

    pub fn max_iterations(self) -> u32 {
        Self::MAX_ITERATIONS
    }

    /// The iteration count of an AlterUserScramCredentials upsertion, or
    /// Kafka's message refusing it (with UNACCEPTABLE_CREDENTIAL).
    pub fn validate_iterations(self, iterations: i32) -> Result<u32, &'static str> {
        match u32::try_from(iterations) {
            Ok(n) if n < self.min_iterations() => Err("Too few iterations"),
            Err(_) => Err("Too few iterations"),
            Ok(n) if n > self.max_iterations() => Err("Too many iterations"),
            Ok(n) => Ok(n),
        }
    }

    /// Bytes of the hash's output (and so of StoredKey, ServerKey, proofs
    /// and signatures).
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    /// H(data).
    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// HMAC(key, parts concatenated).
    fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => hmac_parts::<Hmac<Sha256>>(key, parts),
            ScramMechanism::Sha512 => hmac_parts::<Hmac<Sha512>>(key, parts),
        }
    }

    /// Hi(password, salt, i): PBKDF2-HMAC with the mechanism's hash and an
    /// output of one hash length (RFC 5802 §2.2).
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash_len()];
        match self {
            ScramMechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            ScramMechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn hmac_parts<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes keys of any length (longer ones are hashed): this never
    // fails, and the keys here are never client data.
    let mut mac = match <M as hmac::digest::KeyInit>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// Equality of two byte strings in time that depends only on their
/// lengths (which are public here: one hash length).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    std::hint::black_box(diff) == 0
}

/// What a broker stores for one user and mechanism (RFC 5802 §3): enough
/// to verify a proof and to sign the server-final message, not enough to
/// impersonate the client.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    /// H(ClientKey), where ClientKey = HMAC(SaltedPassword, "Client Key").
    pub stored_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl ScramCredential {
    /// The credential of a salted password, as AlterUserScramCredentials
    /// sends it (Kafka's `ScramFormatter.generateCredential`).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Self {
        let client_key = mechanism.hmac(salted_password, &[b"Client Key"]);
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, &[b"Server Key"]),
            iterations,
        }
    }

    /// The credential of a password: Hi() (PBKDF2-HMAC, `iterations`
    /// rounds — slow on purpose) then [`Self::from_salted_password`].
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Self {
        let salted = mechanism.salted_password(password.as_bytes(), salt, iterations);
        Self::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// Kafka's text form (`ScramCredentialUtils.credentialToString`):
    /// `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N`.
    pub fn to_kafka_string(&self) -> String {
        format!(
            "salt={},stored_key={},server_key={},iterations={}",
            B64.encode(&self.salt),
            B64.encode(&self.stored_key),
            B64.encode(&self.server_key),
            self.iterations
        )
    }

    /// Parses Kafka's text form (`ScramCredentialUtils.credentialFromString`):
    /// exactly the four keys, in any order, each once.
    pub fn parse_kafka_string(text: &str) -> Result<Self, InvalidCredentialString> {
        let mut salt = None;
        let mut stored_key = None;
        let mut server_key = None;
        let mut iterations = None;
        for token in text.split(',') {
            let (key, value) = token
                .split_once('=')
                .filter(|(key, _)| !key.is_empty())
                .ok_or(InvalidCredentialString("a field is not key=value"))?;
            let slot = match key {
                "salt" => &mut salt,
                "stored_key" => &mut stored_key,
                "server_key" => &mut server_key,
                "iterations" => &mut iterations,
                _ => return Err(InvalidCredentialString("unknown key")),
            };
            if slot.replace(value).is_some() {
                return Err(InvalidCredentialString("repeated key"));
            }
        }
        let decode = |value: Option<&str>, what: &'static str| {
            let value = value.ok_or(InvalidCredentialString(what))?;
            B64.decode(value)
                .map_err(|_| InvalidCredentialString("a value is not base64"))
        };
        let salt = decode(salt, "salt missing")?;
        let stored_key = decode(stored_key, "stored_key missing")?;
        let server_key = decode(server_key, "server_key missing")?;
        let iterations = iterations
            .ok_or(InvalidCredentialString("iterations missing"))?
            .parse::<u32>()
            .map_err(|_| InvalidCredentialString("iterations is not a number"))?;
        Ok(ScramCredential {
            salt,
            stored_key,
            server_key,
            iterations,
        })
    }
}

impl fmt::Display for ScramCredential {
    /// Kafka's text form, as [`ScramCredential::to_kafka_string`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_kafka_string())
    }
}

impl FromStr for ScramCredential {
    type Err = InvalidCredentialString;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_kafka_string(s)
    }
}

impl fmt::Debug for ScramCredential {
    /// The keys are left out: they are secrets of the server.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("salt", &B64.encode(&self.salt))
            .field("stored_key", &"<redacted>")
            .field("server_key", &"<redacted>")
            .field("iterations", &self.iterations)
            .finish()
    }
}

/// A credential string that is not Kafka's text form; says why without
/// repeating the string (it holds keys).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Credentials not valid: {0}")]
pub struct InvalidCredentialString(pub &'static str);

/// The extensions of a client-first message (`,key=value` after the
/// nonce), e.g. `tokenauth=true` for delegation tokens. Unknown ones are
/// kept and ignored, as Kafka does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScramExtensions(BTreeMap<String, String>);

impl ScramExtensions {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the client authenticates with a delegation token
    /// (`tokenauth=true`, case-insensitive as Java's `parseBoolean`): the
    /// username is then a token id, and the authenticated principal the
    /// token's owner (which the caller resolves).
    pub fn token_authenticated(&self) -> bool {
        self.get(TOKEN_AUTH_EXTENSION)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }
}

/// Resolves a username to its credential for the exchange's mechanism.
/// Any `FnMut(&str) -> Option<ScramCredential>` is one; implement the
/// trait to look at the extensions too (a delegation token's id is looked
/// up among tokens, not users).
pub trait CredentialLookup {
    fn lookup(&mut self, username: &str, extensions: &ScramExtensions) -> Option<ScramCredential>;
}

impl<F> CredentialLookup for F
where
    F: FnMut(&str) -> Option<ScramCredential>,
{
    fn lookup(&mut self, username: &str, _: &ScramExtensions) -> Option<ScramCredential> {
        self(username)
    }
}

/// Why an exchange failed. After any error the exchange is over: every
/// further step fails with [`ScramError::IllegalState`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("SCRAM message of {len} bytes is longer than the limit of {max}")]
    MessageTooLarge { len: usize, max: usize },
    #[error("Invalid SCRAM client first message: {0}")]
    InvalidClientFirst(&'static str),
    #[error("Invalid SCRAM client final message: {0}")]
    InvalidClientFinal(&'static str),
    #[error("Channel binding is not supported")]
    ChannelBindingNotSupported,
    #[error("Invalid channel binding in the final client message")]
    ChannelBindingMismatch,
    #[error("{AUTHORIZATION_ID_MISMATCH_MESSAGE}")]
    AuthorizationIdMismatch,
    #[error("Invalid client nonce in the final client message.")]
    NonceMismatch,
    /// A wrong password, or a user that does not exist: the two are one
    /// error on purpose.
    #[error("Invalid client credentials")]
    InvalidCredentials,
    #[error("Iterations {iterations} is less than the minimum {minimum} for {mechanism}")]
    TooFewIterations {
        iterations: u32,
        minimum: u32,
        mechanism: ScramMechanism,
    },
    #[error("Authentication failed: no secure random numbers")]
    RandomUnavailable,
    #[error("Unexpected challenge in Sasl server state {0}")]
    IllegalState(&'static str),
}

impl ScramError {
    /// The `error_message` a Kafka client sees in SaslAuthenticate for this
    /// error. Like Kafka, it names nothing but the phase and the mechanism,
    /// except for an authorization id mismatch and a step out of order.
    pub fn client_message(&self, mechanism: ScramMechanism, reauthentication: bool) -> String {
        match self {
            ScramError::AuthorizationIdMismatch | ScramError::IllegalState(_) => self.to_string(),
            _ => invalid_credentials_message(mechanism.name(), reauthentication),
        }
    }

    /// Whether this is a step out of order (ILLEGAL_SASL_STATE) rather
    /// than a refusal (SASL_AUTHENTICATION_FAILED).
    pub fn is_illegal_state(&self) -> bool {
        matches!(self, ScramError::IllegalState(_))
    }
}

/// What a step produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// The server-first message: send it, then pass the client's next
    /// message to [`ScramServer::step`].
    Challenge(Vec<u8>),
    /// The client proved it knows the password: send the server-final
    /// message as the last token.
    Authenticated(Authenticated),
}

/// A successful exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The server-final message (`v=<ServerSignature>`).
    pub server_final: Vec<u8>,
    /// The authenticated username (a token id when
    /// `extensions.token_authenticated()`).
    pub username: String,
    pub extensions: ScramExtensions,
}

/// Where the credential of an exchange came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Known,
    /// No such user: the credential is fake and the proof must fail.
    Unknown,
    /// The user's credential has fewer iterations than Kafka accepts; it
    /// was replaced with a fake one, and the exchange fails at the proof.
    TooFewIterations(u32),
}

enum State {
    AwaitClientFirst,
    AwaitClientFinal(Box<Pending>),
    Complete,
    Failed,
}

impl State {
    /// Kafka's names of its server states, for its "unexpected challenge"
    /// message.
    fn kafka_name(&self) -> &'static str {
        match self {
            State::AwaitClientFirst => "RECEIVE_CLIENT_FIRST_MESSAGE",
            State::AwaitClientFinal(_) => "RECEIVE_CLIENT_FINAL_MESSAGE",
            State::Complete => "COMPLETE",
            State::Failed => "FAILED",
        }
    }
}

/// The exchange between server-first and client-final.
struct Pending {
    username: String,
    extensions: ScramExtensions,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    credential: ScramCredential,
    source: Source,
}

/// The server side of one SCRAM exchange.
pub struct ScramServer<L> {
    mechanism: ScramMechanism,
    lookup: L,
    unknown_user_secret: Option<Vec<u8>>,
    #[cfg(test)]
    server_nonce: Option<String>,
    state: State,
}

impl<L: CredentialLookup> ScramServer<L> {
    pub fn new(mechanism: ScramMechanism, lookup: L) -> Self {
        ScramServer {
            mechanism,
            lookup,
            unknown_user_secret: None,
            #[cfg(test)]
            server_nonce: None,
            state: State::AwaitClientFirst,
        }
    }

    /// The secret from which the fake credentials of unknown users are
    /// derived. Give all brokers of a cluster the same one, kept across
    /// restarts, so an unknown user's salt never changes; by default it is
    /// random per process.
    pub fn with_unknown_user_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.unknown_user_secret = Some(secret.into());
        self
    }

    /// A server whose nonce part is fixed, to reproduce published
    /// exchanges. Tests only: a real nonce must be unpredictable.
    #[cfg(test)]
    fn with_server_nonce(mut self, nonce: &str) -> Self {
        self.server_nonce = Some(nonce.to_owned());
        self
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Whether the exchange ended in success.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete)
    }

    /// Whether the exchange ended in failure.
    pub fn is_failed(&self) -> bool {
        matches!(self.state, State::Failed)
    }

    /// Takes the client's next message and returns the server's answer.
    /// Any error ends the exchange.
    pub fn step(&mut self, client_message: &[u8]) -> Result<StepOutcome, ScramError> {
        if matches!(self.state, State::Complete | State::Failed) {
            // Refused without undoing the outcome.
            return Err(ScramError::IllegalState(self.state.kafka_name()));
        }
        let result = match std::mem::replace(&mut self.state, State::Failed) {
            State::AwaitClientFirst => self.client_first(client_message),
            State::AwaitClientFinal(pending) => {
                client_final(self.mechanism, &pending, client_message)
            }
            State::Complete | State::Failed => Err(ScramError::IllegalState("FAILED")),
        };
        let (outcome, next) = result?;
        self.state = next;
        Ok(outcome)
    }

    fn client_first(&mut self, message: &[u8]) -> Result<(StepOutcome, State), ScramError> {
        let first = ClientFirst::parse(message)?;
        if let Some(authzid) = &first.authzid {
            if *authzid != first.username {
                return Err(ScramError::AuthorizationIdMismatch);
            }
        }
        let server_nonce = self.server_nonce()?;
        let secret = match &self.unknown_user_secret {
            Some(secret) => secret.clone(),
            None => process_secret()?.to_vec(),
        };
        // Derived for every user, used for unknown ones: the work done
        // does not depend on whether the user exists.
        let fake = fake_credential(self.mechanism, &secret, &first.username);
        let (credential, source) = match self.lookup.lookup(&first.username, &first.extensions) {
            Some(c) if c.iterations < self.mechanism.min_iterations() => {
                let iterations = c.iterations;
                (fake, Source::TooFewIterations(iterations))
            }
            Some(c) => (c, Source::Known),
            None => (fake, Source::Unknown),
        };
        let nonce = format!("{}{}", first.nonce, server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        let outcome = StepOutcome::Challenge(server_first.clone().into_bytes());
        let pending = Pending {
            username: first.username,
            extensions: first.extensions,
            gs2_header: first.gs2_header.to_owned(),
            client_first_bare: first.bare.to_owned(),
            server_first,
            nonce,
            credential,
            source,
        };
        Ok((outcome, State::AwaitClientFinal(Box::new(pending))))
    }

    fn server_nonce(&self) -> Result<String, ScramError> {
        #[cfg(test)]
        if let Some(nonce) = &self.server_nonce {
            return Ok(nonce.clone());
        }
        let mut bytes = [0u8; 17];
        getrandom::getrandom(&mut bytes).map_err(|_| ScramError::RandomUnavailable)?;
        Ok(base36_130_bits(bytes))
    }
}

/// The client-final step: checks and answers with the server-final.
fn client_final(
    mechanism: ScramMechanism,
    pending: &Pending,
    message: &[u8],
) -> Result<(StepOutcome, State), ScramError> {
    let text = bounded_utf8(message, ScramError::InvalidClientFinal("not UTF-8"))?;
    let (without_proof, proof_field) = text
        .rsplit_once(',')
        .ok_or(ScramError::InvalidClientFinal("too few fields"))?;
    let proof_b64 = proof_field
        .strip_prefix("p=")
        .ok_or(ScramError::InvalidClientFinal("the last field is not p="))?;
    let mut fields = without_proof.split(',');
    let channel_binding = fields
        .next()
        .and_then(|f| f.strip_prefix("c="))
        .ok_or(ScramError::InvalidClientFinal("the first field is not c="))?;
    let nonce = fields
        .next()
        .and_then(|f| f.strip_prefix("r="))
        .ok_or(ScramError::InvalidClientFinal("the second field is not r="))?;
    for extension in fields {
        parse_extension(extension).ok_or(ScramError::InvalidClientFinal("malformed extension"))?;
    }
    let channel_binding = B64
        .decode(channel_binding)
        .map_err(|_| ScramError::InvalidClientFinal("c= is not base64"))?;
    let proof = B64
        .decode(proof_b64)
        .map_err(|_| ScramError::InvalidClientFinal("p= is not base64"))?;
    if channel_binding != pending.gs2_header.as_bytes() {
        return Err(ScramError::ChannelBindingMismatch);
    }
    if nonce != pending.nonce {
        return Err(ScramError::NonceMismatch);
    }

    let auth_message = format!(
        "{},{},{}",
        pending.client_first_bare, pending.server_first, without_proof
    );
    let credential = &pending.credential;
    let client_signature = mechanism.hmac(&credential.stored_key, &[auth_message.as_bytes()]);
    let proof_valid = proof.len() == client_signature.len() && {
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        constant_time_eq(&mechanism.hash(&client_key), &credential.stored_key)
    };
    match pending.source {
        Source::Known if proof_valid => {}
        Source::Known | Source::Unknown => return Err(ScramError::InvalidCredentials),
        Source::TooFewIterations(iterations) => {
            return Err(ScramError::TooFewIterations {
                iterations,
                minimum: mechanism.min_iterations(),
                mechanism,
            })
        }
    }
    let server_signature = mechanism.hmac(&credential.server_key, &[auth_message.as_bytes()]);
    let server_final = format!("v={}", B64.encode(server_signature)).into_bytes();
    let outcome = StepOutcome::Authenticated(Authenticated {
        server_final,
        username: pending.username.clone(),
        extensions: pending.extensions.clone(),
    });
    Ok((outcome, State::Complete))
}

/// A random secret for this process, for servers given none.
fn process_secret() -> Result<&'static [u8; 32], ScramError> {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    if let Some(secret) = SECRET.get() {
        return Ok(secret);
    }
    let mut secret = [0u8; 32];
    getrandom::getrandom(&mut secret).map_err(|_| ScramError::RandomUnavailable)?;
    Ok(SECRET.get_or_init(|| secret))
}

/// The credential answered for a user that does not exist: deterministic
/// in (mechanism, secret, username), shaped like a real one (a salt like
/// Kafka's, the minimum iterations, keys of one hash length) and useless:
/// nobody knows a password behind its StoredKey.
fn fake_credential(mechanism: ScramMechanism, secret: &[u8], username: &str) -> ScramCredential {
    let label = |what: &[u8]| -> Vec<u8> {
        mechanism.hmac(
            secret,
            &[
                b"moldau scram unknown user\0",
                mechanism.name().as_bytes(),
                b"\0",
                what,
                b"\0",
                username.as_bytes(),
            ],
        )
    };
    let mut salt_bits = [0u8; 17];
    for (dst, src) in salt_bits.iter_mut().zip(label(b"salt")) {
        *dst = src;
    }
    ScramCredential {
        // Kafka's salts (`ScramFormatter.secureRandomBytes`) are the ASCII
        // base-36 digits of a random 130-bit number.
        salt: base36_130_bits(salt_bits).into_bytes(),
        stored_key: label(b"stored_key"),
        server_key: label(b"server_key"),
        iterations: mechanism.min_iterations(),
    }
}

/// The base-36 digits (lowercase, no leading zeros) of the low 130 bits of
/// a big-endian number: Java's `new BigInteger(130, random).toString(36)`,
/// the form of Kafka's nonces and salts.
fn base36_130_bits(mut bytes: [u8; 17]) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    bytes[0] &= 0x03;
    let mut digits = Vec::with_capacity(26);
    while bytes.iter().any(|&b| b != 0) {
        // One long division by 36, most significant byte first.
        let mut remainder: u16 = 0;
        for byte in bytes.iter_mut() {
            let value = (remainder << 8) | u16::from(*byte);
            *byte = (value / 36) as u8;
            remainder = value % 36;
        }
        digits.push(DIGITS[usize::from(remainder)]);
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    digits.reverse();
    digits.into_iter().map(char::from).collect()
}

/// A client message as text, if within [`MAX_CLIENT_MESSAGE_LEN`] and
/// UTF-8.
fn bounded_utf8(message: &[u8], not_utf8: ScramError) -> Result<&str, ScramError> {
    if message.len() > MAX_CLIENT_MESSAGE_LEN {
        return Err(ScramError::MessageTooLarge {
            len: message.len(),
            max: MAX_CLIENT_MESSAGE_LEN,
        });
    }
    std::str::from_utf8(message).map_err(|_| not_utf8)
}

/// A parsed client-first message.
struct ClientFirst<'a> {
    /// `n,,`, `y,,` or with an authzid, `n,a=<saslname>,`.
    gs2_header: &'a str,
    /// Unescaped.
    authzid: Option<String>,
    /// The client-first-message-bare, as sent (part of the AuthMessage).
    bare: &'a str,
    /// Unescaped.
    username: String,
    nonce: &'a str,
    extensions: ScramExtensions,
}

impl<'a> ClientFirst<'a> {
    fn parse(message: &'a [u8]) -> Result<Self, ScramError> {
        use ScramError::InvalidClientFirst as Invalid;
        let text = bounded_utf8(message, Invalid("not UTF-8"))?;
        let mut parts = text.splitn(3, ',');
        let flag = parts.next().unwrap_or_default();
        let authzid_field = parts.next().ok_or(Invalid("no gs2 header"))?;
        let bare = parts.next().ok_or(Invalid("no gs2 header"))?;
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => return Err(ScramError::ChannelBindingNotSupported),
            _ => return Err(Invalid("unknown gs2 channel binding flag")),
        }
        let gs2_len = flag.len() + authzid_field.len() + 2;
        let gs2_header = text.get(..gs2_len).ok_or(Invalid("no gs2 header"))?;
        let authzid = if authzid_field.is_empty() {
            None
        } else {
            let name = authzid_field
                .strip_prefix("a=")
                .ok_or(Invalid("the authzid field is not a="))?;
            Some(unescape_saslname(name).ok_or(Invalid("malformed authzid"))?)
        };

        let mut fields = bare.split(',');
        let first = fields.next().unwrap_or_default();
        if first.starts_with("m=") {
            return Err(Invalid("mandatory extensions are not supported"));
        }
        let username = first
            .strip_prefix("n=")
            .and_then(unescape_saslname)
            .ok_or(Invalid("malformed username"))?;
        let nonce = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .filter(|n| is_printable_nonce(n))
            .ok_or(Invalid("malformed nonce"))?;
        let mut extensions = BTreeMap::new();
        for field in fields {
            let (key, value) = parse_extension(field).ok_or(Invalid("malformed extension"))?;
            if extensions.len() >= MAX_EXTENSIONS {
                return Err(Invalid("too many extensions"));
            }
            if extensions
                .insert(key.to_owned(), value.to_owned())
                .is_some()
            {
                return Err(Invalid("repeated extension"));
            }
        }
        Ok(ClientFirst {
            gs2_header,
            authzid,
            bare,
            username,
            nonce,
            extensions: ScramExtensions(extensions),
        })
    }
}

/// A saslname without its escapes (`=2C` is `,`, `=3D` is `=`); `None` if
/// empty, if it holds a NUL, or if a `=` starts no escape.
fn unescape_saslname(name: &str) -> Option<String> {
    if name.is_empty() || name.contains('\0') {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some((before, after)) = rest.split_once('=') {
        out.push_str(before);
        if let Some(tail) = after.strip_prefix("2C") {
            out.push(',');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("3D") {
            out.push('=');
            rest = tail;
        } else {
            return None;
        }
    }
    out.push_str(rest);
    Some(out)
}

/// RFC 5802's `printable`: ASCII 0x21..=0x7E except `,`, at least one.
fn is_printable_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// An extension `key=value`: the key ASCII letters (Kafka's grammar), the
/// value non-empty without NUL (commas cannot occur: fields are split on
/// them).
fn parse_extension(field: &str) -> Option<(&str, &str)> {
    let (key, value) = field.split_once('=')?;
    let key_ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic());
    let value_ok = !value.is_empty() && !value.contains('\0');
    (key_ok && value_ok).then_some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7677 §3: user "user", password "pencil".
    const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                    p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
    const RFC_SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";

    // The same exchange with SCRAM-SHA-512 (same user, password, nonces,
    // salt, iterations). No published vector exists; computed once with
    // Python's hashlib.pbkdf2_hmac / hmac / hashlib.sha512, by a script
    // that also reproduces the RFC 7677 SHA-256 vector above bit for bit.
    const SHA512_CREDENTIAL: &str = "salt=W22ZaJ0SNY7soEsUEjb6gQ==,\
        stored_key=6AAub3065EYRmyFpM2RNwqK+eGnrkYuEWbXn19LsEmBqzu8QaCXNc1FwpnX9NhH2hK/60dzj9DoO5DvVkOHbvg==,\
        server_key=jZHbYjC1aHh0/hKbxyBuGFjDrgjgKTT1esA7awWiKcRZ0o/0b1yWEebBeSVkkCFewf91nLDfKF24mvD5nmE6rA==,\
        iterations=4096";
    const SHA512_CLIENT_FINAL: &str =
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
        p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ==";
    const SHA512_SERVER_FINAL: &str = "v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw==";
    // SCRAM-SHA-256's credential for the RFC 7677 user, by the same script.
    const SHA256_CREDENTIAL: &str = "salt=W22ZaJ0SNY7soEsUEjb6gQ==,\
        stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,\
        server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096";

    fn rfc_salt() -> Vec<u8> {
        B64.decode(RFC_SALT_B64).unwrap()
    }

    fn pencil(mechanism: ScramMechanism) -> ScramCredential {
        ScramCredential::from_password(mechanism, "pencil", &rfc_salt(), 4096)
    }

    /// A lookup knowing "user" with password "pencil".
    fn users(mechanism: ScramMechanism) -> impl FnMut(&str) -> Option<ScramCredential> {
        let credential = pencil(mechanism);
        move |name: &str| (name == "user").then(|| credential.clone())
    }

    fn challenge(outcome: StepOutcome) -> String {
        match outcome {
            StepOutcome::Challenge(bytes) => String::from_utf8(bytes).unwrap(),
            other => panic!("expected a challenge, got {other:?}"),
        }
    }

    fn authenticated(outcome: StepOutcome) -> Authenticated {
        match outcome {
            StepOutcome::Authenticated(a) => a,
            other => panic!("expected success, got {other:?}"),
        }
    }

    /// A minimal RFC 5802 client: the client-final message for a
    /// server-first message.
    fn client_final(
        mechanism: ScramMechanism,
        password: &str,
        client_first: &str,
        server_first: &str,
    ) -> String {
        let bare_start = client_first.match_indices(',').nth(1).unwrap().0 + 1;
        let gs2 = &client_first[..bare_start];
        let bare = &client_first[bare_start..];
        let mut nonce = "";
        let mut salt = Vec::new();
        let mut iterations = 0;
        for field in server_first.split(',') {
            let (k, v) = field.split_once('=').unwrap();
            match k {
                "r" => nonce = v,
                "s" => salt = B64.decode(v).unwrap(),
                "i" => iterations = v.parse().unwrap(),
                _ => {}
            }
        }
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = mechanism.hmac(&salted, &[b"Client Key"]);
        let stored_key = mechanism.hash(&client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode(gs2));
        let auth = format!("{bare},{server_first},{without_proof}");
        let signature = mechanism.hmac(&stored_key, &[auth.as_bytes()]);
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        format!("{without_proof},p={}", B64.encode(proof))
    }

    /// Runs a whole exchange; the result of the final step.
    fn exchange(
        mechanism: ScramMechanism,
        lookup: impl CredentialLookup,
        client_first: &str,
        password: &str,
    ) -> Result<StepOutcome, ScramError> {
        let mut server = ScramServer::new(mechanism, lookup);
        let server_first = challenge(server.step(client_first.as_bytes())?);
        let last = client_final(mechanism, password, client_first, &server_first);
        server.step(last.as_bytes())
    }

    #[test]
    fn rfc7677_sha256_exchange() {
        let mech = ScramMechanism::Sha256;
        let mut server = ScramServer::new(mech, users(mech)).with_server_nonce(RFC_SERVER_NONCE);
        let first = server.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        assert_eq!(challenge(first), RFC_SERVER_FIRST);
        assert!(!server.is_complete());
        let done = authenticated(server.step(RFC_CLIENT_FINAL.as_bytes()).unwrap());
        assert_eq!(
            String::from_utf8(done.server_final).unwrap(),
            RFC_SERVER_FINAL
        );
        assert_eq!(done.username, "user");
        assert!(done.extensions.is_empty());
        assert!(server.is_complete());
        // The test client agrees with the RFC's client.
        assert_eq!(
            client_final(mech, "pencil", RFC_CLIENT_FIRST, RFC_SERVER_FIRST),
            RFC_CLIENT_FINAL
        );
    }

    #[test]
    fn sha512_exchange_matches_independent_computation() {
        let mech = ScramMechanism::Sha512;
        let credential: ScramCredential = SHA512_CREDENTIAL.parse().unwrap();
        assert_eq!(credential, pencil(mech));
        let mut server = ScramServer::new(mech, users(mech)).with_server_nonce(RFC_SERVER_NONCE);
        let first = challenge(server.step(RFC_CLIENT_FIRST.as_bytes()).unwrap());
        assert_eq!(first, RFC_SERVER_FIRST);
        let done = authenticated(server.step(SHA512_CLIENT_FINAL.as_bytes()).unwrap());
        assert_eq!(
            String::from_utf8(done.server_final).unwrap(),
            SHA512_SERVER_FINAL
        );
    }

    #[test]
    fn credential_from_password_matches_independent_computation() {
        assert_eq!(
            pencil(ScramMechanism::Sha256).to_kafka_string(),
            SHA256_CREDENTIAL
        );
        assert_eq!(
            pencil(ScramMechanism::Sha512).to_kafka_string(),
            SHA512_CREDENTIAL
        );
    }

    #[test]
    fn credential_from_salted_password_matches_from_password() {
        for mech in ScramMechanism::ALL {
            let salted = mech.salted_password(b"pencil", &rfc_salt(), 4096);
            assert_eq!(salted.len(), mech.hash_len());
            let credential =
                ScramCredential::from_salted_password(mech, &salted, &rfc_salt(), 4096);
            assert_eq!(credential, pencil(mech));
            assert_eq!(credential.stored_key.len(), mech.hash_len());
            assert_eq!(credential.server_key.len(), mech.hash_len());
        }
    }

    #[test]
    fn random_nonce_exchanges_succeed_for_both_mechanisms() {
        for mech in ScramMechanism::ALL {
            let client_first = "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL";
            let done = authenticated(exchange(mech, users(mech), client_first, "pencil").unwrap());
            assert_eq!(done.username, "user");
            assert_eq!(done.server_final.len(), 2 + mech.hash_len().div_ceil(3) * 4);
        }
    }

    #[test]
    fn server_first_extends_the_client_nonce_with_a_fresh_one() {
        let mech = ScramMechanism::Sha256;
        let mut nonces = Vec::new();
        for _ in 0..2 {
            let mut server = ScramServer::new(mech, users(mech));
            let first = challenge(server.step(b"n,,n=user,r=abc").unwrap());
            let nonce = first
                .split(',')
                .next()
                .unwrap()
                .strip_prefix("r=abc")
                .unwrap();
            assert!(nonce.len() >= 20, "{nonce}");
            assert!(is_printable_nonce(nonce));
            nonces.push(nonce.to_owned());
        }
        assert_ne!(nonces[0], nonces[1]);
    }

    #[test]
    fn wrong_password_fails_at_the_proof() {
        let mech = ScramMechanism::Sha256;
        let err = exchange(mech, users(mech), RFC_CLIENT_FIRST, "pencil!").unwrap_err();
        assert_eq!(err, ScramError::InvalidCredentials);
        assert_eq!(
            err.client_message(mech, false),
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
        );
        assert_eq!(
            err.client_message(ScramMechanism::Sha512, true),
            "Authentication failed during re-authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        );
    }

    #[test]
    fn unknown_user_fails_like_a_wrong_password() {
        for mech in ScramMechanism::ALL {
            let known = exchange(mech, users(mech), "n,,n=user,r=abc", "nope").unwrap_err();
            let mut server = ScramServer::new(mech, users(mech)).with_unknown_user_secret(*b"k");
            // The first step answers like for a known user.
            let first = challenge(server.step(b"n,,n=ghost,r=abc").unwrap());
            let fields: Vec<&str> = first.split(',').collect();
            assert_eq!(fields.len(), 3);
            assert!(fields[0].starts_with("r=abc"));
            let salt = B64.decode(fields[1].strip_prefix("s=").unwrap()).unwrap();
            assert!(salt.len() >= 20 && salt.iter().all(|b| b.is_ascii_alphanumeric()));
            assert_eq!(fields[2], "i=4096");
            // Even with "the" password, it fails at the proof, as a wrong one.
            let last = client_final(mech, "pencil", "n,,n=ghost,r=abc", &first);
            let unknown = server.step(last.as_bytes()).unwrap_err();
            assert_eq!(unknown, known);
            assert_eq!(
                unknown.client_message(mech, false),
                known.client_message(mech, false)
            );
            assert!(server.is_failed());
        }
    }

    #[test]
    fn unknown_user_salt_is_stable_per_secret_and_name() {
        let mech = ScramMechanism::Sha512;
        let salt_of = |secret: &[u8], name: &str| {
            let mut server =
                ScramServer::new(mech, |_: &str| None).with_unknown_user_secret(secret);
            let first = challenge(server.step(format!("n,,n={name},r=x").as_bytes()).unwrap());
            first.split(',').nth(1).unwrap().to_owned()
        };
        assert_eq!(salt_of(b"s1", "ghost"), salt_of(b"s1", "ghost"));
        assert_ne!(salt_of(b"s1", "ghost"), salt_of(b"s1", "phantom"));
        assert_ne!(salt_of(b"s1", "ghost"), salt_of(b"s2", "ghost"));
        // Without a secret, the process's own: stable within the process.
        let default_salt = |name: &str| {
            let mut server = ScramServer::new(mech, |_: &str| None);
            challenge(server.step(format!("n,,n={name},r=x").as_bytes()).unwrap())
                .split(',')
                .nth(1)
                .unwrap()
                .to_owned()
        };
        assert_eq!(default_salt("ghost"), default_salt("ghost"));
    }

    #[test]
    fn too_few_iterations_fails_at_the_proof() {
        let mech = ScramMechanism::Sha256;
        let weak = ScramCredential::from_password(mech, "pencil", b"salt", 1024);
        let err = exchange(
            mech,
            move |_: &str| Some(weak.clone()),
            "n,,n=user,r=a",
            "pencil",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Iterations 1024 is less than the minimum 4096 for SCRAM-SHA-256"
        );
        assert_eq!(
            err.client_message(mech, false),
            invalid_credentials_message("SCRAM-SHA-256", false)
        );
    }

    #[test]
    fn wrong_nonce_fails() {
        let mech = ScramMechanism::Sha256;
        let mut server = ScramServer::new(mech, users(mech)).with_server_nonce(RFC_SERVER_NONCE);
        server.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        // The right proof for a nonce the server did not send.
        let forged = RFC_CLIENT_FINAL.replace("k0,p=", "k1,p=");
        assert_eq!(
            server.step(forged.as_bytes()),
            Err(ScramError::NonceMismatch)
        );
        // A prefix of the nonce (the client's part alone) fails too.
        let mut server = ScramServer::new(mech, users(mech));
        let first = challenge(server.step(b"n,,n=user,r=abc").unwrap());
        let nonce_field = first.split(',').next().unwrap();
        let client_part_only = first.replacen(nonce_field, "r=abc", 1);
        let last = client_final(mech, "pencil", "n,,n=user,r=abc", &client_part_only);
        assert_eq!(server.step(last.as_bytes()), Err(ScramError::NonceMismatch));
    }

    #[test]
    fn channel_binding() {
        let mech = ScramMechanism::Sha256;
        // "p=" (the client requires channel binding) is refused.
        let mut server = ScramServer::new(mech, users(mech));
        assert_eq!(
            server.step(b"p=tls-unique,,n=user,r=abc"),
            Err(ScramError::ChannelBindingNotSupported)
        );
        assert!(server.is_failed());
        // "y" is accepted, and its c= must be the base64 of "y,,".
        let done = exchange(mech, users(mech), "y,,n=user,r=abc", "pencil").unwrap();
        authenticated(done);
        // c= other than the gs2 header sent ("biws" after "y,,") fails.
        let mut server = ScramServer::new(mech, users(mech));
        let first = challenge(server.step(b"y,,n=user,r=abc").unwrap());
        let last = client_final(mech, "pencil", "n,,n=user,r=abc", &first);
        assert!(last.starts_with("c=biws,"));
        assert_eq!(
            server.step(last.as_bytes()),
            Err(ScramError::ChannelBindingMismatch)
        );
        // So does RFC 7677's final message with c= replaced.
        let mut server = ScramServer::new(mech, users(mech)).with_server_nonce(RFC_SERVER_NONCE);
        server.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        let bad = RFC_CLIENT_FINAL.replace("c=biws", "c=eSws");
        assert_eq!(
            server.step(bad.as_bytes()),
            Err(ScramError::ChannelBindingMismatch)
        );
    }

    #[test]
    fn authzid_must_be_the_username() {
        let mech = ScramMechanism::Sha256;
        let mut server = ScramServer::new(mech, users(mech));
        let err = server.step(b"n,a=admin,n=user,r=abc").unwrap_err();
        assert_eq!(err, ScramError::AuthorizationIdMismatch);
        assert_eq!(
            err.client_message(mech, false),
            "Authentication failed: Client requested an authorization id that is different from username"
        );
        // Equal to the username: fine, and part of the channel binding.
        let client_first = "n,a=user,n=user,r=abc";
        let done = authenticated(exchange(mech, users(mech), client_first, "pencil").unwrap());
        assert_eq!(done.username, "user");
        // Compared unescaped.
        let lookup = |name: &str| (name == "a,b=c").then(|| pencil(ScramMechanism::Sha256));
        let client_first = "n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=abc";
        let done = authenticated(exchange(mech, lookup, client_first, "pencil").unwrap());
        assert_eq!(done.username, "a,b=c");
    }

    #[test]
    fn username_escapes() {
        assert_eq!(unescape_saslname("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(unescape_saslname("=3D=2C").as_deref(), Some("=,"));
        assert_eq!(unescape_saslname("jürgen").as_deref(), Some("jürgen"));
        for bad in ["", "a=", "a=2", "a=2c", "a=41", "=", "a\0b"] {
            assert_eq!(unescape_saslname(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn extensions_are_exposed() {
        /// Knows one delegation token, and no users.
        struct Tokens;
        impl CredentialLookup for Tokens {
            fn lookup(&mut self, name: &str, ext: &ScramExtensions) -> Option<ScramCredential> {
                (ext.token_authenticated() && name == "tokenid")
                    .then(|| pencil(ScramMechanism::Sha512))
            }
        }
        let mech = ScramMechanism::Sha512;
        let client_first = "n,,n=tokenid,r=abc,tokenauth=true,other=x";
        let done = authenticated(exchange(mech, Tokens, client_first, "pencil").unwrap());
        assert!(done.extensions.token_authenticated());
        assert_eq!(done.extensions.get("other"), Some("x"));
        assert_eq!(done.extensions.iter().count(), 2);
        let as_user = exchange(mech, Tokens, "n,,n=tokenid,r=abc", "pencil");
        assert_eq!(as_user, Err(ScramError::InvalidCredentials));
        let ext = |s: &str| ScramExtensions([("tokenauth".into(), s.into())].into());
        assert!(ext("TRUE").token_authenticated());
        assert!(!ext("yes").token_authenticated());
        assert!(!ScramExtensions::default().token_authenticated());
    }

    #[test]
    fn client_final_extensions_are_allowed_and_signed() {
        let mech = ScramMechanism::Sha256;
        let mut server = ScramServer::new(mech, users(mech));
        let first = challenge(server.step(b"n,,n=user,r=abc").unwrap());
        // Build the client-final with an extension by hand.
        let nonce = first.split(',').next().unwrap();
        let without_proof = format!("c=biws,{nonce},x=y");
        let salted = mech.salted_password(b"pencil", &rfc_salt(), 4096);
        let client_key = mech.hmac(&salted, &[b"Client Key"]);
        let auth = format!("n=user,r=abc,{first},{without_proof}");
        let sig = mech.hmac(&mech.hash(&client_key), &[auth.as_bytes()]);
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let last = format!("{without_proof},p={}", B64.encode(proof));
        authenticated(server.step(last.as_bytes()).unwrap());
    }

    #[test]
    fn malformed_client_first_messages_are_refused() {
        let mech = ScramMechanism::Sha256;
        let too_long = format!("n,,n=user,r={}", "a".repeat(MAX_CLIENT_MESSAGE_LEN));
        let too_many = format!(
            "n,,n=user,r=abc{}",
            (0..=MAX_EXTENSIONS)
                .map(|i| format!(",e{}=v", char::from(b'a' + i as u8)))
                .collect::<String>()
        );
        let cases: Vec<&[u8]> = vec![
            b"",
            b"n",
            b"n,",
            b"n,,",
            b",,n=user,r=abc",
            b"x,,n=user,r=abc",
            b"n,b=user,n=user,r=abc",
            b"n,a=,n=user,r=abc",
            b"n,,m=ext,n=user,r=abc",
            b"n,,n=,r=abc",
            b"n,,n=us=er,r=abc",
            b"n,,user,r=abc",
            b"n,,n=user",
            b"n,,n=user,r=",
            b"n,,n=user,abc",
            b"n,,n=user,r=a\x7fb",
            b"n,,n=user,r=abc,",
            b"n,,n=user,r=abc,noequals",
            b"n,,n=user,r=abc,=v",
            b"n,,n=user,r=abc,k=",
            b"n,,n=user,r=abc,k1=v",
            b"n,,n=user,r=abc,k=v,k=w",
            b"n,,n=\xff,r=abc",
            b"n,,n=u\0,r=abc",
            too_long.as_bytes(),
            too_many.as_bytes(),
        ];
        for case in cases {
            let mut server = ScramServer::new(mech, users(mech));
            let err = server.step(case).unwrap_err();
            assert!(
                matches!(
                    err,
                    ScramError::InvalidClientFirst(_) | ScramError::MessageTooLarge { .. }
                ),
                "{:?}: {err:?}",
                String::from_utf8_lossy(case)
            );
            assert!(server.is_failed());
            assert_eq!(
                err.client_message(mech, false),
                invalid_credentials_message("SCRAM-SHA-256", false)
            );
        }
    }

    #[test]
    fn malformed_client_final_messages_are_refused() {
        let mech = ScramMechanism::Sha256;
        let nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let proof = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        let cases = [
            String::new(),
            "c=biws".to_owned(),
            format!("c=biws,r={nonce}"),
            format!("r={nonce},c=biws,p={proof}"),
            format!("c=biws,p={proof}"),
            format!("c=biws,r={nonce},p=not base64!"),
            format!("c=b!ws,r={nonce},p={proof}"),
            format!("c=biws,r={nonce},p={proof},x=y"),
            format!("c=biws,r={nonce},bad,p={proof}"),
            format!("c=biws,r={nonce},p={proof}\u{0}"),
            format!("c=biws,r={nonce},p={}", "A".repeat(MAX_CLIENT_MESSAGE_LEN)),
        ];
        for case in cases {
            let mut server =
                ScramServer::new(mech, users(mech)).with_server_nonce(RFC_SERVER_NONCE);
            server.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
            let err = server.step(case.as_bytes()).unwrap_err();
            assert!(
                matches!(
                    err,
                    ScramError::InvalidClientFinal(_) | ScramError::MessageTooLarge { .. }
                ),
                "{case:?}: {err:?}"
            );
            assert!(server.is_failed());
        }
        // Invalid UTF-8.
        let mut server = ScramServer::new(mech, users(mech)).with_server_nonce(RFC_SERVER_NONCE);
        server.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        assert_eq!(
            server.step(b"c=biws,r=\xff,p=AAAA"),
            Err(ScramError::InvalidClientFinal("not UTF-8"))
        );
        // A well-formed proof of the wrong length is a wrong proof.
        let mut server = ScramServer::new(mech, users(mech)).with_server_nonce(RFC_SERVER_NONCE);
        server.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        let short = format!("c=biws,r={nonce},p=AAAA");
        assert_eq!(
            server.step(short.as_bytes()),
            Err(ScramError::InvalidCredentials)
        );
    }

    #[test]
    fn steps_out_of_order_are_illegal() {
        let mech = ScramMechanism::Sha256;
        let mut server = ScramServer::new(mech, users(mech)).with_server_nonce(RFC_SERVER_NONCE);
        server.step(RFC_CLIENT_FIRST.as_bytes()).unwrap();
        server.step(RFC_CLIENT_FINAL.as_bytes()).unwrap();
        let err = server.step(RFC_CLIENT_FINAL.as_bytes()).unwrap_err();
        assert_eq!(err, ScramError::IllegalState("COMPLETE"));
        assert!(err.is_illegal_state());
        assert_eq!(
            err.client_message(mech, false),
            "Unexpected challenge in Sasl server state COMPLETE"
        );
        assert!(server.is_complete(), "a stray step does not undo a success");

        let mut server = ScramServer::new(mech, users(mech));
        server.step(b"garbage").unwrap_err();
        assert_eq!(
            server.step(RFC_CLIENT_FIRST.as_bytes()),
            Err(ScramError::IllegalState("FAILED"))
        );
    }

    #[test]
    fn credential_string_round_trip() {
        for mech in ScramMechanism::ALL {
            let credential = pencil(mech);
            let text = credential.to_string();
            assert_eq!(text.parse::<ScramCredential>().unwrap(), credential);
        }
        // Keys in any order.
        let reordered = "iterations=4096,server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,\
            stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,salt=W22ZaJ0SNY7soEsUEjb6gQ==";
        assert_eq!(
            ScramCredential::parse_kafka_string(reordered).unwrap(),
            pencil(ScramMechanism::Sha256)
        );
        let bad = [
            "",
            "salt=AAAA",
            "salt=AAAA,stored_key=AAAA,server_key=AAAA",
            "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096,extra=1",
            "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=x",
            "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=-1",
            "salt=A!AA,stored_key=AAAA,server_key=AAAA,iterations=4096",
            "salt=AAAA,salt=AAAA,server_key=AAAA,iterations=4096",
            "=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096",
            "salt,stored_key=AAAA,server_key=AAAA,iterations=4096",
        ];
        for text in bad {
            assert!(ScramCredential::parse_kafka_string(text).is_err(), "{text}");
        }
        // Debug shows no keys.
        let debug = format!("{:?}", pencil(ScramMechanism::Sha256));
        assert!(
            !debug.contains("WG5d8o") && debug.contains("redacted"),
            "{debug}"
        );
    }

    #[test]
    fn mechanism_vocabulary() {
        use ScramMechanism::*;
        assert_eq!(Sha256.name(), "SCRAM-SHA-256");
        assert_eq!(Sha512.name(), "SCRAM-SHA-512");
        assert_eq!(ScramMechanism::from_name("SCRAM-SHA-512"), Some(Sha512));
        assert_eq!(ScramMechanism::from_name("scram-sha-256"), None);
        assert_eq!((Sha256.id(), Sha512.id()), (1, 2));
        assert_eq!(ScramMechanism::from_id(1), Some(Sha256));
        assert_eq!(ScramMechanism::from_id(0), None);
        assert_eq!(ScramMechanism::from_id(3), None);
        assert_eq!(
            (Sha512.min_iterations(), Sha512.max_iterations()),
            (4096, 16384)
        );
        assert_eq!(Sha256.validate_iterations(4096), Ok(4096));
        assert_eq!(Sha256.validate_iterations(16384), Ok(16384));
        assert_eq!(Sha256.validate_iterations(4095), Err("Too few iterations"));
        assert_eq!(Sha256.validate_iterations(-1), Err("Too few iterations"));
        assert_eq!(
            Sha256.validate_iterations(16385),
            Err("Too many iterations")
        );
    }

    #[test]
    fn base36_matches_java_biginteger() {
        assert_eq!(base36_130_bits([0; 17]), "0");
        let mut one = [0; 17];
        one[16] = 35;
        assert_eq!(base36_130_bits(one), "z");
        one[16] = 36;
        assert_eq!(base36_130_bits(one), "10");
        // 2^130 - 1 (the top byte masked to its two low bits).
        assert_eq!(base36_130_bits([0xff; 17]), "1omfro7zwmumr3umxudzyj6scf");
        assert_eq!(
            u128::from_str_radix(
                &base36_130_bits([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3]),
                36
            ),
            Ok(0x010203)
        );
    }

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
