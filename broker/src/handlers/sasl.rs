//! SASL (issue 38): SaslHandshake v1 and SaslAuthenticate, for clients
//! on a SASL_PLAINTEXT listener and for the cluster's own brokers.
//!
//! - Clients use the listener's `sasl.enabled.mechanisms`: PLAIN (users
//!   and passwords from the listener's JAAS config, as Kafka's default
//!   PLAIN callback reads them) or SCRAM-SHA-256/512 (the salted
//!   credentials of the cluster's metadata, managed with
//!   AlterUserScramCredentials; the exchange itself is
//!   `security::scram`'s). Success makes the connection's principal
//!   `User:<name>`. A failure is answered SASL_AUTHENTICATION_FAILED with
//!   Kafka's message after `connection.failed.authentication.delay.ms`,
//!   and the connection closes, as Kafka's does.
//! - Brokers use `MOLDAU-BROKER`: a follower proves which registered
//!   broker it is, so its fetches may carry a replica id. Its token is
//!   `<node id>:<incarnation>` — the UUID the broker process registered
//!   with, which the controller shares only with the cluster's brokers
//!   (over gRPC, never in a Kafka response) — accepted while the current
//!   metadata image shows that broker with that incarnation. It is served
//!   on every listener.
//!
//! Only SaslHandshake v1 (tokens framed in SaslAuthenticate) is served.
//! With `connections.max.reauth.ms` (KIP-368; 0, the default, turns it
//! off) a client's session has that lifetime, told in
//! `session_lifetime_ms`: the client re-authenticates on the same
//! connection before it ends (same user, same mechanism, or the
//! connection closes), and a connection whose session ended serves
//! nothing but the re-authentication.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use crate::image::MetadataImage;
use crate::protocol::principal::{ConnectionContext, PendingExchange, Principal, SaslStage};
use crate::security::listener::{ClientListener, SaslMechanism};
use crate::security::oauthbearer::{self, Validator};
use crate::security::scram::{ScramCredential, ScramServer, StepOutcome};
use crate::security::{plain, scram};

/// The brokers' own mechanism.
pub const MECHANISM: &str = "MOLDAU-BROKER";

/// The token a broker sends.
pub fn token(node_id: i32, incarnation: Uuid) -> String {
    format!("{node_id}:{incarnation}")
}

/// The broker a token names, if the image shows it registered as such.
pub fn verify(image: &MetadataImage, token: &[u8]) -> Option<(i32, Uuid)> {
    let text = std::str::from_utf8(token).ok()?;
    let (node, incarnation) = text.split_once(':')?;
    let node: i32 = node.parse().ok()?;
    let incarnation = Uuid::parse_str(incarnation).ok()?;
    let registered = image.broker(node)?.incarnation?;
    (registered == incarnation).then_some((node, incarnation))
}

/// The mechanisms a handshake offers on `listener`: its clients' ones,
/// then the brokers'.
pub fn offered(listener: &ClientListener) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = if listener.requires_sasl() {
        listener.mechanisms.iter().map(|m| m.name()).collect()
    } else {
        Vec::new()
    };
    names.push(MECHANISM);
    names
}

/// The mechanism a handshake asks for, if `listener` offers it.
fn choose(listener: &ClientListener, name: &str) -> Option<&'static str> {
    offered(listener).into_iter().find(|m| *m == name)
}

/// Whether `ctx` may start a re-authentication (KIP-368): a user
/// authenticated on a listener whose sessions have a lifetime.
fn may_reauthenticate(listener: &ClientListener, ctx: &ConnectionContext) -> bool {
    listener.max_reauth_ms > 0
        && matches!(ctx.sasl, SaslStage::Done)
        && matches!(ctx.principal, Principal::User(_))
}

pub fn handshake(
    listener: &ClientListener,
    ctx: &mut ConnectionContext,
    req: SaslHandshakeRequest,
) -> SaslHandshakeResponse {
    let response = SaslHandshakeResponse::default()
        .with_mechanisms(offered(listener).into_iter().map(str_bytes).collect());
    if !ctx.sasl.is_start() && !may_reauthenticate(listener, ctx) {
        return response.with_error_code(ResponseError::IllegalSaslState.code());
    }
    match choose(listener, req.mechanism.as_str()) {
        Some(name) => {
            ctx.sasl = SaslStage::Handshaken(name);
            response
        }
        None => response.with_error_code(ResponseError::UnsupportedSaslMechanism.code()),
    }
}

/// Where a SCRAM exchange finds a user's credential.
type CredentialSource = Box<dyn FnMut(&str) -> Option<ScramCredential> + Send>;

/// A SCRAM exchange between its two client messages: the server reads the
/// cluster's credentials as they were when the exchange began.
type ScramExchange = ScramServer<CredentialSource>;

fn refused(code: ResponseError, message: &str) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_code(code.code())
        .with_error_message(Some(str_bytes(message)))
}

/// A failed client authentication: told after the configured delay, then
/// the connection closes.
fn failed(
    listener: &ClientListener,
    ctx: &mut ConnectionContext,
    message: &str,
) -> SaslAuthenticateResponse {
    ctx.sasl = SaslStage::Done;
    ctx.close_after_reply = Some(std::time::Duration::from_millis(
        listener.failed_authentication_delay_ms,
    ));
    tracing::info!(peer = %ctx.peer, reason = message, "client authentication failed");
    refused(ResponseError::SaslAuthenticationFailed, message)
}

fn authenticated(
    listener: &ClientListener,
    ctx: &mut ConnectionContext,
    mechanism: &'static str,
    user: &str,
    token: Vec<u8>,
) -> SaslAuthenticateResponse {
    authenticated_until(listener, ctx, mechanism, user, token, None)
}

/// A success; with `credential_expires_at_ms` (an OAUTHBEARER token's
/// `exp`) the session ends no later than the credential, as Kafka's
/// (re-authentication must be on: `connections.max.reauth.ms` > 0).
fn authenticated_until(
    listener: &ClientListener,
    ctx: &mut ConnectionContext,
    mechanism: &'static str,
    user: &str,
    token: Vec<u8>,
    credential_expires_at_ms: Option<i64>,
) -> SaslAuthenticateResponse {
    if let Principal::User(before) = &ctx.principal {
        // a re-authentication: Kafka lets neither change
        if before.as_ref() != user || ctx.authenticated_with != Some(mechanism) {
            return failed(
                listener,
                ctx,
                "Cannot change principals or SASL mechanisms during re-authentication",
            );
        }
    }
    ctx.sasl = SaslStage::Done;
    ctx.principal = Principal::User(Arc::from(user));
    ctx.authenticated_with = Some(mechanism);
    let mut lifetime_ms = listener.max_reauth_ms;
    if let (true, Some(expires)) = (lifetime_ms > 0, credential_expires_at_ms) {
        let left = u64::try_from(expires - crate::clock::now_ms()).unwrap_or(0);
        lifetime_ms = lifetime_ms.min(left.max(1));
    }
    ctx.session_expires_at = (lifetime_ms > 0)
        .then(|| std::time::Instant::now() + std::time::Duration::from_millis(lifetime_ms));
    tracing::debug!(peer = %ctx.peer, user, mechanism, "client authenticated");
    SaslAuthenticateResponse::default()
        .with_auth_bytes(token.into())
        .with_session_lifetime_ms(i64::try_from(lifetime_ms).unwrap_or(i64::MAX))
}

pub fn authenticate(
    broker: &Broker,
    listener: &ClientListener,
    ctx: &mut ConnectionContext,
    req: SaslAuthenticateRequest,
) -> SaslAuthenticateResponse {
    match std::mem::replace(&mut ctx.sasl, SaslStage::Done) {
        SaslStage::Handshaken(MECHANISM) => broker_token(broker, ctx, &req.auth_bytes),
        SaslStage::Handshaken(name) => match SaslMechanism::from_name(name) {
            Some(SaslMechanism::Plain) => {
                let users = &listener.plain_users;
                match plain::authenticate(&req.auth_bytes, |user, password| {
                    users
                        .get(user)
                        .is_some_and(|expected| plain::passwords_equal(password, expected))
                }) {
                    Ok(user) => authenticated(listener, ctx, name, &user, Vec::new()),
                    Err(e) => failed(listener, ctx, &e.client_message(false)),
                }
            }
            Some(SaslMechanism::Scram(mechanism)) => {
                let image = broker.image();
                let lookup: CredentialSource =
                    Box::new(move |user: &str| image.scram_credential(user, mechanism));
                scram_step(
                    listener,
                    ctx,
                    ScramServer::new(mechanism, lookup),
                    &req.auth_bytes,
                )
            }
            Some(SaslMechanism::OAuthBearer) => oauth_first(listener, ctx, &req.auth_bytes),
            None => refused(ResponseError::IllegalSaslState, "no mechanism chosen"),
        },
        SaslStage::Exchanging(PendingExchange(state)) => {
            let state = match state.downcast::<ScramExchange>() {
                Ok(server) => return scram_step(listener, ctx, *server, &req.auth_bytes),
                Err(other) => other,
            };
            match state.downcast::<OAuthChallenge>() {
                Ok(challenge) if oauthbearer::is_error_acknowledgement(&req.auth_bytes) => {
                    failed(listener, ctx, &challenge.0)
                }
                // a new first message after a refusal, as Kafka allows
                Ok(_) => oauth_first(listener, ctx, &req.auth_bytes),
                Err(_) => refused(ResponseError::IllegalSaslState, "no exchange under way"),
            }
        }
        SaslStage::Start => refused(
            ResponseError::IllegalSaslState,
            "SaslAuthenticate must follow a SaslHandshake",
        ),
        SaslStage::Done => refused(
            ResponseError::IllegalSaslState,
            "this connection has already authenticated",
        ),
    }
}

fn scram_step(
    listener: &ClientListener,
    ctx: &mut ConnectionContext,
    mut server: ScramExchange,
    message: &[u8],
) -> SaslAuthenticateResponse {
    let mechanism = server.mechanism();
    match server.step(message) {
        Ok(StepOutcome::Challenge(server_first)) => {
            ctx.sasl = SaslStage::Exchanging(PendingExchange(Box::new(server)));
            SaslAuthenticateResponse::default().with_auth_bytes(server_first.into())
        }
        Ok(StepOutcome::Authenticated(done)) => {
            if done.extensions.token_authenticated() {
                // delegation tokens are not served: nothing to look a
                // token up in, so no token id is a user
                return failed(
                    listener,
                    ctx,
                    &scram::invalid_credentials_message(mechanism.name(), false),
                );
            }
            authenticated(
                listener,
                ctx,
                mechanism.name(),
                &done.username,
                done.server_final,
            )
        }
        Err(e) if e.is_illegal_state() => refused(ResponseError::IllegalSaslState, &e.to_string()),
        Err(e) => failed(listener, ctx, &e.client_message(mechanism, false)),
    }
}

/// An OAUTHBEARER refusal told to the client as a challenge, awaiting
/// its `%x01` acknowledgement (RFC 7628 section 3.2.3).
struct OAuthChallenge(String);

/// Kafka's text for a first message that does not parse (its generic
/// answer to a `SaslException`).
const OAUTH_GENERIC_FAILURE: &str =
    "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER";

/// OAUTHBEARER's first message: the token validated by the listener's
/// validator; a refusal becomes the error challenge.
fn oauth_first(
    listener: &ClientListener,
    ctx: &mut ConnectionContext,
    message: &[u8],
) -> SaslAuthenticateResponse {
    let Some(oauth) = &listener.oauth else {
        return refused(
            ResponseError::IllegalSaslState,
            "OAUTHBEARER is not configured",
        );
    };
    let response = match oauthbearer::parse_initial_response(message) {
        Ok(r) => r,
        Err(e) => {
            tracing::info!(peer = %ctx.peer, reason = %e, "OAUTHBEARER client message refused");
            return failed(listener, ctx, OAUTH_GENERIC_FAILURE);
        }
    };
    let now = crate::clock::now_ms();
    let rules = &oauth.settings.rules;
    let outcome = match &oauth.settings.validator {
        Validator::Unsecured => oauthbearer::validate_unsecured(&response.token, rules, now),
        Validator::Jwks { .. } => oauth.keys.validate(&response.token, rules, now),
    };
    match outcome {
        Ok(token) => {
            if !response.authzid.is_empty() && response.authzid != token.principal {
                let message = format!(
                    "Authentication failed: Client requested an authorization id ({}) that is different from the token's principal name ({})",
                    response.authzid, token.principal
                );
                return failed(listener, ctx, &message);
            }
            authenticated_until(
                listener,
                ctx,
                oauthbearer::MECHANISM,
                &token.principal,
                Vec::new(),
                Some(token.expires_at_ms),
            )
        }
        Err(refusal) => {
            tracing::info!(peer = %ctx.peer, reason = %refusal.reason, "OAUTHBEARER token refused");
            let challenge = refusal.challenge();
            ctx.sasl =
                SaslStage::Exchanging(PendingExchange(Box::new(OAuthChallenge(challenge.clone()))));
            SaslAuthenticateResponse::default().with_auth_bytes(challenge.into_bytes().into())
        }
    }
}

/// `MOLDAU-BROKER`: the token of a registered broker.
fn broker_token(
    broker: &Broker,
    ctx: &mut ConnectionContext,
    token: &[u8],
) -> SaslAuthenticateResponse {
    match verify(&broker.image(), token) {
        Some((node_id, incarnation)) => {
            ctx.principal = Principal::Broker {
                node_id,
                incarnation,
            };
            tracing::debug!(peer = %ctx.peer, node_id, "broker authenticated");
            SaslAuthenticateResponse::default()
        }
        None => {
            tracing::warn!(peer = %ctx.peer, "refused a broker authentication: not a registered broker");
            refused(
                ResponseError::SaslAuthenticationFailed,
                "not a registered broker of this cluster",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::BrokerImage;

    fn image(incarnation: Uuid) -> MetadataImage {
        MetadataImage::new(
            "c",
            1,
            vec![BrokerImage {
                id: 2,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
                endpoints: vec![],
                incarnation: Some(incarnation),
            }],
            [],
        )
    }

    #[test]
    fn only_a_registered_broker_with_its_current_incarnation_is_accepted() {
        let current = Uuid::new_v4();
        let image = image(current);
        assert_eq!(
            verify(&image, token(2, current).as_bytes()),
            Some((2, current))
        );
        // an earlier process of the same broker, another broker, garbage
        assert_eq!(verify(&image, token(2, Uuid::new_v4()).as_bytes()), None);
        assert_eq!(verify(&image, token(3, current).as_bytes()), None);
        for bad in [&b""[..], b"2", b"2:", b"x:y", b"\xff\xfe", b"2:not-a-uuid"] {
            assert_eq!(verify(&image, bad), None, "{bad:?}");
        }
        // a standalone image names no incarnations
        let mut standalone = image.clone();
        standalone.brokers[0].incarnation = None;
        assert_eq!(verify(&standalone, token(2, current).as_bytes()), None);
    }

    #[test]
    fn the_exchange_is_handshake_then_one_authenticate() {
        let plaintext = ClientListener::default();
        let mut ctx = ConnectionContext::new("127.0.0.1:1".parse().unwrap());
        let wrong = handshake(
            &plaintext,
            &mut ctx,
            SaslHandshakeRequest::default().with_mechanism(str_bytes("PLAIN")),
        );
        assert_eq!(
            wrong.error_code,
            ResponseError::UnsupportedSaslMechanism.code(),
            "a plaintext listener offers clients nothing"
        );
        assert_eq!(wrong.mechanisms.len(), 1);
        assert_eq!(wrong.mechanisms[0].as_str(), MECHANISM);
        let ok = handshake(
            &plaintext,
            &mut ctx,
            SaslHandshakeRequest::default().with_mechanism(str_bytes(MECHANISM)),
        );
        assert_eq!(ok.error_code, 0);
        let again = handshake(
            &plaintext,
            &mut ctx,
            SaslHandshakeRequest::default().with_mechanism(str_bytes(MECHANISM)),
        );
        assert_eq!(again.error_code, ResponseError::IllegalSaslState.code());
    }

    #[test]
    fn a_sasl_listener_offers_its_mechanisms_then_the_brokers_one() {
        let props: std::collections::BTreeMap<String, String> = [
            ("listeners", "SASL_PLAINTEXT://127.0.0.1:0"),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512,PLAIN"),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"b\";",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let listener = crate::security::listener::listeners(&props)
            .unwrap()
            .all
            .remove(0);
        assert_eq!(
            offered(&listener),
            vec!["SCRAM-SHA-512", "PLAIN", MECHANISM]
        );
        let mut ctx = ConnectionContext::requiring_sasl("127.0.0.1:1".parse().unwrap());
        assert!(!ctx.is_authenticated(std::time::Instant::now()));
        let r = handshake(
            &listener,
            &mut ctx,
            SaslHandshakeRequest::default().with_mechanism(str_bytes("SCRAM-SHA-256")),
        );
        assert_eq!(r.error_code, ResponseError::UnsupportedSaslMechanism.code());
        let r = handshake(
            &listener,
            &mut ctx,
            SaslHandshakeRequest::default().with_mechanism(str_bytes("PLAIN")),
        );
        assert_eq!(r.error_code, 0);
        assert!(matches!(ctx.sasl, SaslStage::Handshaken("PLAIN")));
    }
}
