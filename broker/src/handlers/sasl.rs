//! SASL, for brokers only: the mechanism `MOLDAU-BROKER` lets a follower
//! prove which registered broker it is, so its fetches may carry a
//! replica id. Its token is `<node id>:<incarnation>` — the UUID the
//! broker process registered with, which the controller shares only with
//! the cluster's brokers (over gRPC, never in a Kafka response) — and it
//! is accepted while the current metadata image shows that broker with
//! that incarnation. Kafka clients need no SASL here: their connections
//! stay anonymous. Only SaslHandshake v1 (tokens framed in
//! SaslAuthenticate) is served.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use crate::image::MetadataImage;
use crate::protocol::principal::{ConnectionContext, Principal, SaslStage};

/// The one mechanism served.
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

pub fn handshake(ctx: &mut ConnectionContext, req: SaslHandshakeRequest) -> SaslHandshakeResponse {
    let response = SaslHandshakeResponse::default().with_mechanisms(vec![str_bytes(MECHANISM)]);
    if ctx.sasl != SaslStage::Start {
        return response.with_error_code(ResponseError::IllegalSaslState.code());
    }
    if req.mechanism.as_str() != MECHANISM {
        return response.with_error_code(ResponseError::UnsupportedSaslMechanism.code());
    }
    ctx.sasl = SaslStage::Handshaken;
    response
}

pub fn authenticate(
    broker: &Broker,
    ctx: &mut ConnectionContext,
    req: SaslAuthenticateRequest,
) -> SaslAuthenticateResponse {
    let refused = |code: ResponseError, message: &str| {
        SaslAuthenticateResponse::default()
            .with_error_code(code.code())
            .with_error_message(Some(str_bytes(message)))
    };
    if ctx.sasl != SaslStage::Handshaken {
        return refused(
            ResponseError::IllegalSaslState,
            "SaslAuthenticate must follow a SaslHandshake",
        );
    }
    ctx.sasl = SaslStage::Done;
    match verify(&broker.image(), &req.auth_bytes) {
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
        let mut ctx = ConnectionContext::new("127.0.0.1:1".parse().unwrap());
        let wrong = handshake(
            &mut ctx,
            SaslHandshakeRequest::default().with_mechanism(str_bytes("PLAIN")),
        );
        assert_eq!(
            wrong.error_code,
            ResponseError::UnsupportedSaslMechanism.code()
        );
        assert_eq!(wrong.mechanisms[0].as_str(), MECHANISM);
        let ok = handshake(
            &mut ctx,
            SaslHandshakeRequest::default().with_mechanism(str_bytes(MECHANISM)),
        );
        assert_eq!(ok.error_code, 0);
        let again = handshake(
            &mut ctx,
            SaslHandshakeRequest::default().with_mechanism(str_bytes(MECHANISM)),
        );
        assert_eq!(again.error_code, ResponseError::IllegalSaslState.code());
    }
}
