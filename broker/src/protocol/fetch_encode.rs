//! Hand-written encoding of Fetch responses (v4–v12) as a list of pieces:
//! buffers the broker builds, and file regions of segments. The connection
//! writes the buffers and `sendfile`s the regions, so log bytes never pass
//! through user space.
//!
//! The `kafka-protocol` crate would need the records as one in-memory
//! buffer; this module exists only to avoid that copy. Its output is checked
//! against the crate's decoder in the tests below.

use bytes::{BufMut, Bytes, BytesMut};

use crate::storage::FetchSlice;

/// A part of a response on the wire.
#[derive(Debug, Clone)]
pub enum Piece {
    Bytes(Bytes),
    File(FetchSlice),
}

impl Piece {
    pub fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b) => b.len() as u64,
            Piece::File(f) => f.len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One partition of a Fetch response.
#[derive(Debug, Clone)]
pub struct PartitionOut {
    pub index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// read_committed (isolation level 1): `(producer id, first offset)`
    /// of the aborted transactions the records overlap; `None` encodes
    /// null (read_uncommitted, or nothing read).
    pub aborted_transactions: Option<Vec<(i64, i64)>>,
    pub records: Option<FetchSlice>,
    /// A follower's log diverged (v12+): the leader's `(epoch, end offset)`
    /// for the follower's last fetched epoch.
    pub diverging_epoch: Option<(i32, i64)>,
    /// KIP-392 (v11+): the replica the consumer should fetch from instead
    /// (-1: this one).
    pub preferred_read_replica: i32,
}

/// One topic of a Fetch response.
#[derive(Debug, Clone)]
pub struct TopicOut {
    pub name: String,
    pub partitions: Vec<PartitionOut>,
}

/// The top level of a Fetch response.
#[derive(Debug, Clone, Default)]
pub struct FetchOut {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub session_id: i32,
    pub topics: Vec<TopicOut>,
}

fn put_uvarint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// Encodes a whole response frame (size prefix, header, body) for `version`.
pub fn encode_fetch_response(correlation_id: i32, version: i16, out: &FetchOut) -> Vec<Piece> {
    let flexible = version >= 12;
    let mut pieces = Vec::new();
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0); // size, patched below
    buf.put_i32(correlation_id);
    if flexible {
        put_uvarint(&mut buf, 0); // header tagged fields
    }
    buf.put_i32(out.throttle_time_ms);
    if version >= 7 {
        buf.put_i16(out.error_code);
        buf.put_i32(out.session_id);
    }
    if flexible {
        put_uvarint(&mut buf, out.topics.len() as u64 + 1);
    } else {
        buf.put_i32(out.topics.len() as i32);
    }
    for topic in &out.topics {
        if flexible {
            put_uvarint(&mut buf, topic.name.len() as u64 + 1);
        } else {
            buf.put_i16(topic.name.len() as i16);
        }
        buf.put_slice(topic.name.as_bytes());
        if flexible {
            put_uvarint(&mut buf, topic.partitions.len() as u64 + 1);
        } else {
            buf.put_i32(topic.partitions.len() as i32);
        }
        for p in &topic.partitions {
            buf.put_i32(p.index);
            buf.put_i16(p.error_code);
            buf.put_i64(p.high_watermark);
            buf.put_i64(p.last_stable_offset);
            if version >= 5 {
                buf.put_i64(p.log_start_offset);
            }
            match &p.aborted_transactions {
                None if flexible => put_uvarint(&mut buf, 0),
                None => buf.put_i32(-1),
                Some(aborted) => {
                    if flexible {
                        put_uvarint(&mut buf, aborted.len() as u64 + 1);
                    } else {
                        buf.put_i32(aborted.len() as i32);
                    }
                    for &(producer_id, first_offset) in aborted {
                        buf.put_i64(producer_id);
                        buf.put_i64(first_offset);
                        if flexible {
                            put_uvarint(&mut buf, 0);
                        }
                    }
                }
            }
            if version >= 11 {
                buf.put_i32(p.preferred_read_replica);
            }
            let len = p.records.as_ref().map_or(0, |r| r.len);
            if flexible {
                put_uvarint(&mut buf, len + 1);
            } else {
                buf.put_i32(len as i32);
            }
            if let Some(records) = p.records.as_ref().filter(|r| r.len > 0) {
                pieces.push(Piece::Bytes(buf.split().freeze()));
                pieces.push(Piece::File(records.clone()));
            }
            if flexible {
                // partition tagged fields: diverging_epoch is tag 0
                match p.diverging_epoch {
                    Some((epoch, end_offset)) => {
                        put_uvarint(&mut buf, 1);
                        put_uvarint(&mut buf, 0);
                        put_uvarint(&mut buf, 13);
                        buf.put_i32(epoch);
                        buf.put_i64(end_offset);
                        put_uvarint(&mut buf, 0);
                    }
                    None => put_uvarint(&mut buf, 0),
                }
            }
        }
        if flexible {
            put_uvarint(&mut buf, 0); // topic tagged fields
        }
    }
    if flexible {
        put_uvarint(&mut buf, 0); // response tagged fields
    }
    pieces.push(Piece::Bytes(buf.freeze()));
    let total: u64 = pieces.iter().map(Piece::len).sum::<u64>() - 4;
    // Patch the size prefix in the first buffer.
    if let Some(Piece::Bytes(first)) = pieces.first_mut() {
        let mut patched = BytesMut::from(&first[..]);
        patched[..4].copy_from_slice(&(total as i32).to_be_bytes());
        *first = patched.freeze();
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{FetchResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    use std::sync::Arc;

    fn flatten(pieces: &[Piece]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Bytes(b) => out.extend_from_slice(b),
                Piece::File(f) => {
                    let mut chunk = vec![0u8; f.len as usize];
                    f.file.read_exact_at(&mut chunk, f.position).unwrap();
                    out.extend_from_slice(&chunk);
                }
            }
        }
        out
    }

    #[test]
    fn encoding_matches_the_protocol_crate_for_every_version() {
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(b"xxxxRECORDBYTESyyyy").unwrap();
        let file = Arc::new(tmp);
        let out = FetchOut {
            throttle_time_ms: 7,
            error_code: 0,
            session_id: 0,
            topics: vec![
                TopicOut {
                    name: "alpha".into(),
                    partitions: vec![
                        PartitionOut {
                            index: 0,
                            error_code: 0,
                            high_watermark: 42,
                            last_stable_offset: 42,
                            log_start_offset: 3,
                            aborted_transactions: Some(vec![(7, 40), (8, 41)]),
                            records: Some(FetchSlice {
                                file: file.clone(),
                                position: 4,
                                len: 11,
                            }),
                            diverging_epoch: None,
                            preferred_read_replica: 2,
                        },
                        PartitionOut {
                            index: 1,
                            error_code: 1,
                            high_watermark: 5,
                            last_stable_offset: 5,
                            log_start_offset: 0,
                            aborted_transactions: None,
                            records: None,
                            diverging_epoch: Some((3, 17)),
                            preferred_read_replica: -1,
                        },
                    ],
                },
                TopicOut {
                    name: "b".into(),
                    partitions: vec![],
                },
            ],
        };
        for version in 4..=12i16 {
            let wire = flatten(&encode_fetch_response(99, version, &out));
            let size = i32::from_be_bytes(wire[..4].try_into().unwrap()) as usize;
            assert_eq!(size, wire.len() - 4, "v{version}");
            let mut body = Bytes::copy_from_slice(&wire[4..]);
            let header_version = if version >= 12 { 1 } else { 0 };
            let header = ResponseHeader::decode(&mut body, header_version).unwrap();
            assert_eq!(header.correlation_id, 99);
            let resp = FetchResponse::decode(&mut body, version).unwrap();
            assert!(body.is_empty(), "v{version}: trailing bytes");
            assert_eq!(resp.throttle_time_ms, 7);
            assert_eq!(resp.responses.len(), 2);
            assert_eq!(resp.responses[0].topic.as_str(), "alpha");
            let p0 = &resp.responses[0].partitions[0];
            assert_eq!(p0.high_watermark, 42);
            let aborted: Vec<(i64, i64)> = p0
                .aborted_transactions
                .iter()
                .flatten()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect();
            assert_eq!(aborted, vec![(7, 40), (8, 41)], "v{version}");
            assert!(resp.responses[0].partitions[1]
                .aborted_transactions
                .is_none());
            assert_eq!(p0.records.as_deref(), Some(&b"RECORDBYTES"[..]));
            if version >= 5 {
                assert_eq!(p0.log_start_offset, 3);
            }
            let p1 = &resp.responses[0].partitions[1];
            assert_eq!(p1.error_code, 1);
            assert_eq!(p1.records.as_deref().map(<[u8]>::len).unwrap_or(0), 0);
            if version >= 12 {
                assert_eq!(
                    (p1.diverging_epoch.epoch, p1.diverging_epoch.end_offset),
                    (3, 17)
                );
                assert_eq!(p0.diverging_epoch.epoch, -1, "absent: the default");
            }
            if version >= 11 {
                assert_eq!(p0.preferred_read_replica.0, 2);
                assert_eq!(p1.preferred_read_replica.0, -1);
            }
        }
    }
}
