//! Broker-side compression (`compression.type` other than `producer`):
//! the leader re-encodes a produced batch with the topic's codec when the
//! producer used another one, as Kafka's `LogValidator` does.
//!
//! Only the records' container changes: the payload is decompressed
//! (bounded, see `compression`) and the same record bytes are compressed
//! again with the target codec and its `compression.*.level`. The batch
//! header keeps everything else — base offset, timestamps (base and max:
//! the records are the same), producer id, epoch, base sequence,
//! transactional flag, timestamp type — and gets a new `batchLength`,
//! codec bits and CRC. Records are not rebuilt, so keys, values and
//! headers (duplicated header keys included) stay byte for byte.
//!
//! Control batches are never touched, and followers append what the
//! leader stored byte for byte (`append_replicated`), so recompression
//! happens once, on the leader's produce path. `producer` keeps the
//! zero-copy path: nothing here runs.

use std::io::Write;

use bytes::BytesMut;
use kafka_protocol::compression::Compressor;
use kafka_protocol::records::Compression;

use super::batch::{self, BatchHeader, BATCH_HEADER_LEN};
use super::compression::{self, DecompressError, MAX_DECOMPRESSED_BATCH_BYTES};
use super::{Result, StorageError};

/// What a topic's batches are stored as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetCompression {
    /// `compression.type=producer`: as the producer sent them.
    Producer,
    /// A codec (`uncompressed` is `Compression::None`) and its level
    /// (`compression.gzip.level`, `compression.lz4.level`,
    /// `compression.zstd.level`; ignored for snappy and none).
    Codec { codec: Compression, level: i32 },
}

/// Kafka's codec ids (attributes bits 0–2).
pub fn codec_id(codec: Compression) -> u8 {
    match codec {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
        Compression::Zstd => 4,
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::Io(std::io::Error::other(format!("{what} compression: {e}")))
}

/// Compresses `raw` (a batch's concatenated records) with `codec` at
/// `level`, in the framing Kafka's clients read: gzip (level 1–9, -1 =
/// zlib's default), snappy in xerial framing, LZ4 frames with independent
/// 64 KiB blocks and no content checksum (as Kafka's
/// `KafkaLZ4BlockOutputStream`), zstd frames.
pub fn compress(raw: &[u8], codec: Compression, level: i32) -> Result<Vec<u8>> {
    match codec {
        Compression::None => Ok(raw.to_vec()),
        Compression::Gzip => {
            let level = match u32::try_from(level) {
                Ok(l @ 1..=9) => flate2::Compression::new(l),
                _ => flate2::Compression::default(),
            };
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(raw).map_err(|e| failed("gzip", e))?;
            e.finish().map_err(|e| failed("gzip", e))
        }
        Compression::Snappy => {
            let mut out = BytesMut::new();
            kafka_protocol::compression::Snappy::compress(&mut out, |b: &mut BytesMut| {
                b.extend_from_slice(raw);
                Ok(())
            })
            .map_err(|e| failed("snappy", e))?;
            Ok(out.to_vec())
        }
        Compression::Lz4 => {
            let mut e = lz4::EncoderBuilder::new()
                .level(u32::try_from(level.clamp(1, 17)).unwrap_or(9))
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::new())
                .map_err(|e| failed("lz4", e))?;
            e.write_all(raw).map_err(|e| failed("lz4", e))?;
            let (out, done) = e.finish();
            done.map_err(|e| failed("lz4", e))?;
            Ok(out)
        }
        Compression::Zstd => zstd::bulk::compress(raw, level).map_err(|e| failed("zstd", e)),
    }
}

/// Whether a batch must be recompressed to be stored as `target`.
pub fn needs_recompression(h: &BatchHeader, target: TargetCompression) -> bool {
    match target {
        TargetCompression::Producer => false,
        TargetCompression::Codec { codec, .. } => {
            !h.is_control() && h.records_count > 0 && h.compression() != codec_id(codec)
        }
    }
}

/// One batch (exactly `bytes`, already validated) re-encoded with `codec`.
pub fn recompress_batch(
    bytes: &[u8],
    h: &BatchHeader,
    codec: Compression,
    level: i32,
) -> Result<Vec<u8>> {
    let payload = bytes
        .get(BATCH_HEADER_LEN..h.total_size())
        .ok_or_else(|| StorageError::CorruptBatch("short batch".into()))?;
    let source = compression::codec_of(h.compression())
        .map_err(|e| StorageError::CorruptBatch(e.to_string()))?;
    let raw = compression::decompress_all(payload, source, MAX_DECOMPRESSED_BATCH_BYTES).map_err(
        |e| match e {
            DecompressError::TooLarge { limit } => StorageError::MessageTooLarge {
                size: limit.saturating_add(1),
                max: limit,
            },
            other => StorageError::CorruptBatch(other.to_string()),
        },
    )?;
    let packed = compress(&raw, codec, level)?;
    batch::with_payload(bytes, &packed, codec_id(codec))
}

/// The record set `buf` (batches described by `headers`) with every batch
/// that needs it recompressed to `target`, and how many were; `None` when
/// none needed it (the caller keeps `buf` as is).
pub fn recompress(
    buf: &[u8],
    headers: &[BatchHeader],
    target: TargetCompression,
) -> Result<Option<(Vec<u8>, usize)>> {
    let TargetCompression::Codec { codec, level } = target else {
        return Ok(None);
    };
    if !headers.iter().any(|h| needs_recompression(h, target)) {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(buf.len());
    let mut count = 0usize;
    let mut pos = 0usize;
    for h in headers {
        let end = pos + h.total_size();
        let bytes = buf
            .get(pos..end)
            .ok_or_else(|| StorageError::CorruptBatch("batch runs past the record set".into()))?;
        if needs_recompression(h, target) {
            out.extend_from_slice(&recompress_batch(bytes, h, codec, level)?);
            count += 1;
        } else {
            out.extend_from_slice(bytes);
        }
        pos = end;
    }
    Ok(Some((out, count)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::records::{Record, RecordBatchDecoder, TimestampType};

    use crate::storage::test_batches::CODECS;

    fn records(n: i64, transactional: bool) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                transactional,
                control: false,
                partition_leader_epoch: -1,
                producer_id: 77,
                producer_epoch: 3,
                timestamp_type: TimestampType::Creation,
                offset: i,
                sequence: 40 + i as i32,
                timestamp: 1_000 + i,
                key: Some(Bytes::from(format!("key-{i}"))),
                value: Some(Bytes::from(vec![b'v'; 300])),
                headers: IndexMap::from([(
                    kafka_protocol::protocol::StrBytes::from_static_str("h"),
                    Some(Bytes::from_static(b"x")),
                )]),
                delete_horizon: false,
            })
            .collect()
    }

    fn encode(rs: &[Record], c: Compression) -> Vec<u8> {
        batch::encode_records(rs, c).unwrap()
    }

    #[test]
    fn every_codec_to_every_codec_keeps_records_and_header() {
        for from in CODECS {
            for to in CODECS {
                for level in [-1, 1, 3, 9] {
                    let rs = records(20, true);
                    let input = encode(&rs, from);
                    let h = batch::validate_one(&input).unwrap();
                    let target = TargetCompression::Codec { codec: to, level };
                    let Some((out, n)) = recompress(&input, &[h], target).unwrap() else {
                        assert_eq!(codec_id(from), codec_id(to));
                        continue;
                    };
                    assert_ne!(codec_id(from), codec_id(to));
                    assert_eq!(n, 1);
                    let nh = batch::validate_one(&out).expect("valid batch, CRC included");
                    assert_eq!(nh.compression(), codec_id(to), "{from:?} -> {to:?}");
                    assert_eq!(nh.total_size(), out.len());
                    for (a, b) in [
                        (nh.base_offset, h.base_offset),
                        (nh.base_timestamp, h.base_timestamp),
                        (nh.max_timestamp, h.max_timestamp),
                        (nh.producer_id, h.producer_id),
                        (i64::from(nh.producer_epoch), i64::from(h.producer_epoch)),
                        (i64::from(nh.base_sequence), i64::from(h.base_sequence)),
                        (i64::from(nh.records_count), i64::from(h.records_count)),
                        (
                            i64::from(nh.last_offset_delta),
                            i64::from(h.last_offset_delta),
                        ),
                        (i64::from(nh.attributes & !7), i64::from(h.attributes & !7)),
                    ] {
                        assert_eq!(a, b, "{from:?} -> {to:?}");
                    }
                    assert!(nh.is_transactional());
                    let back = RecordBatchDecoder::decode_with_custom_compression(
                        &mut Bytes::from(out.clone()),
                        Some(compression::decompress),
                    )
                    .unwrap()
                    .records;
                    assert_eq!(back.len(), rs.len());
                    for (a, b) in back.iter().zip(&rs) {
                        assert_eq!(
                            (&a.key, &a.value, &a.headers),
                            (&b.key, &b.value, &b.headers)
                        );
                        assert_eq!(
                            (a.timestamp, a.offset, a.sequence),
                            (b.timestamp, b.offset, b.sequence)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn producer_and_same_codec_and_control_batches_are_left_alone() {
        let input = encode(&records(3, false), Compression::Lz4);
        let h = batch::validate_one(&input).unwrap();
        assert!(recompress(&input, &[h], TargetCompression::Producer)
            .unwrap()
            .is_none());
        let lz4 = TargetCompression::Codec {
            codec: Compression::Lz4,
            level: 9,
        };
        assert!(recompress(&input, &[h], lz4).unwrap().is_none());
        let mut control = records(1, true);
        control[0].control = true;
        control[0].key = Some(Bytes::from_static(&[0, 0, 0, 1]));
        control[0].value = Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0]));
        control[0].headers.clear();
        let c = encode(&control, Compression::None);
        let ch = batch::validate_one(&c).unwrap();
        assert!(ch.is_control());
        assert!(!needs_recompression(&ch, lz4));
        // A record set mixing both: only the data batch changes.
        let plain = encode(&records(4, false), Compression::None);
        let ph = batch::validate_one(&plain).unwrap();
        let mut both = plain.clone();
        both.extend_from_slice(&c);
        let (out, n) = recompress(&both, &[ph, ch], lz4).unwrap().unwrap();
        assert_eq!(n, 1);
        let hs = batch::validate_batches(&out, usize::MAX).unwrap();
        assert_eq!(hs[0].compression(), 3);
        assert_eq!(&out[hs[0].total_size()..], &c[..]);
    }

    #[test]
    fn levels_change_the_output_and_stay_readable() {
        let raw: Vec<u8> = (0..200_000u32)
            .map(|i| (i % 251) as u8 ^ (i / 7) as u8)
            .collect();
        for (codec, lo, hi) in [
            (Compression::Gzip, 1, 9),
            (Compression::Lz4, 1, 17),
            (Compression::Zstd, -5, 19),
        ] {
            let a = compress(&raw, codec, lo).unwrap();
            let b = compress(&raw, codec, hi).unwrap();
            assert_ne!(a, b, "{codec:?}");
            for packed in [a, b] {
                let back = compression::decompress_all(&packed, codec, 1 << 20).unwrap();
                assert_eq!(back, raw, "{codec:?}");
            }
        }
    }
}
