//! Kafka request/response framing and API version negotiation, as pure
//! functions over byte buffers (the socket lives in `admin`).

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

use super::KafkaError;

/// Largest response frame accepted (guards against garbage lengths).
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// The API versions a broker supports: api key → (min, max).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiVersions(pub BTreeMap<i16, (i16, i16)>);

impl ApiVersions {
    /// From an ApiVersions response.
    pub fn from_response(resp: &ApiVersionsResponse) -> Self {
        ApiVersions(
            resp.api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect(),
        )
    }

    /// The highest version of request `R` both sides speak.
    pub fn negotiate<R: Request>(&self, name: &'static str) -> Result<i16, KafkaError> {
        let ours = R::VERSIONS;
        let (min, max) = self
            .0
            .get(&R::KEY)
            .copied()
            .ok_or(KafkaError::Unsupported(name))?;
        let v = max.min(ours.max);
        if v < min.max(ours.min) {
            return Err(KafkaError::Unsupported(name));
        }
        Ok(v)
    }
}

fn proto(e: impl std::fmt::Display) -> KafkaError {
    KafkaError::Protocol(e.to_string())
}

/// Encodes one request frame (length prefix, header, body).
pub fn encode_request<R: Request>(
    req: &R,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> Result<Bytes, KafkaError> {
    let api_key = ApiKey::try_from(R::KEY).map_err(|_| proto("unknown API key"))?;
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api_key.request_header_version(version))
        .map_err(proto)?;
    req.encode(&mut body, version).map_err(proto)?;
    let len = i32::try_from(body.len()).map_err(proto)?;
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(len);
    frame.extend_from_slice(&body);
    Ok(frame.freeze())
}

/// Length of a frame from its 4-byte prefix, checked against [`MAX_FRAME`].
pub fn frame_len(prefix: [u8; 4]) -> Result<usize, KafkaError> {
    let len = i32::from_be_bytes(prefix);
    let len = usize::try_from(len).map_err(|_| proto(format!("negative frame length {len}")))?;
    if len > MAX_FRAME {
        return Err(proto(format!("frame of {len} bytes is too large")));
    }
    Ok(len)
}

/// Decodes a response frame body (without the length prefix), checking the
/// correlation id.
pub fn decode_response<R: Request>(
    mut body: Bytes,
    version: i16,
    correlation_id: i32,
) -> Result<R::Response, KafkaError> {
    let api_key = ApiKey::try_from(R::KEY).map_err(|_| proto("unknown API key"))?;
    let header = ResponseHeader::decode(&mut body, api_key.response_header_version(version))
        .map_err(proto)?;
    if header.correlation_id != correlation_id {
        return Err(proto(format!(
            "correlation id {} does not match request {}",
            header.correlation_id, correlation_id
        )));
    }
    let resp = R::Response::decode(&mut body, version).map_err(proto)?;
    if body.has_remaining() {
        return Err(proto(format!(
            "{} bytes left after the response",
            body.remaining()
        )));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::messages::{
        ApiVersionsRequest, CreateTopicsRequest, MetadataRequest, MetadataResponse,
    };
    use kafka_protocol::protocol::Message;

    #[test]
    fn negotiation_picks_highest_common_version() {
        let resp = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(3)
                .with_min_version(0)
                .with_max_version(100),
            ApiVersion::default()
                .with_api_key(19)
                .with_min_version(0)
                .with_max_version(1),
        ]);
        let v = ApiVersions::from_response(&resp);
        assert_eq!(
            v.negotiate::<MetadataRequest>("Metadata").unwrap(),
            MetadataRequest::VERSIONS.max
        );
        // CreateTopics: broker max 1 < our min 2
        assert!(matches!(
            v.negotiate::<CreateTopicsRequest>("CreateTopics"),
            Err(KafkaError::Unsupported(_))
        ));
        assert!(v.negotiate::<ApiVersionsRequest>("ApiVersions").is_err());
    }

    #[test]
    fn request_frame_round_trips() {
        let req = MetadataRequest::default().with_topics(None);
        let frame = encode_request(&req, 12, 7, "moldau-operator").unwrap();
        let len = frame_len(frame[..4].try_into().unwrap()).unwrap();
        assert_eq!(len, frame.len() - 4);
        let mut body = frame.slice(4..);
        let header =
            kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
        assert_eq!(header.correlation_id, 7);
        assert_eq!(header.request_api_version, 12);
        let back = MetadataRequest::decode(&mut body, 12).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn response_correlation_is_checked() {
        let mut buf = BytesMut::new();
        let version = 12;
        ResponseHeader::default()
            .with_correlation_id(5)
            .encode(&mut buf, ApiKey::Metadata.response_header_version(version))
            .unwrap();
        MetadataResponse::default()
            .encode(&mut buf, version)
            .unwrap();
        let body = buf.freeze();
        assert!(decode_response::<MetadataRequest>(body.clone(), version, 5).is_ok());
        assert!(decode_response::<MetadataRequest>(body, version, 6).is_err());
    }

    #[test]
    fn bad_frame_lengths_are_errors() {
        assert!(frame_len((-1i32).to_be_bytes()).is_err());
        assert!(frame_len(((MAX_FRAME + 1) as i32).to_be_bytes()).is_err());
        assert_eq!(frame_len(10i32.to_be_bytes()).unwrap(), 10);
    }
}
