//! Bounded decompression of record batch payloads (gzip, snappy, lz4, zstd).
//!
//! This module owns one rule: no compressed payload, from a producer or from
//! a log file, can make the broker hold more than
//! [`MAX_DECOMPRESSED_BATCH_BYTES`] of its records. A 256 KiB zstd batch that
//! inflates to 8 GiB is refused after the limit, not inflated. Kafka itself
//! has no such bound; Moldau adds one because one request must not be able to
//! exhaust a broker's memory. 64 MiB is far above what a producer builds:
//! librdkafka caps an uncompressed batch at its `message.max.bytes`
//! (1,000,000 by default) and the Java producer closes a batch near
//! `batch.size` (16 KiB) of estimated compressed bytes.
//!
//! [`decoder`] gives a streaming reader (record validation walks it without
//! holding the whole payload); [`decompress`] is the whole-buffer form that
//! `kafka_protocol`'s `RecordBatchDecoder::decode_with_custom_compression`
//! takes, used wherever the broker decodes records into values. Nothing in
//! the broker may let `kafka_protocol` pick its own decompressor: those are
//! unbounded.
//!
//! Snappy payloads use the xerial framing that the Java client writes (a
//! 16-byte magic header, then blocks of `u32` length + raw snappy block), or
//! one raw snappy block when the magic is absent, as Kafka accepts both.

use std::io::{self, Read};

use bytes::Bytes;
use kafka_protocol::records::Compression;

/// The most bytes the records of one batch may decompress to.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 64 * 1024 * 1024;

/// Why a payload could not be decompressed.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    #[error("compressed records are corrupt: {0}")]
    Corrupt(String),
    #[error("records decompress to more than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
}

/// The codec of attribute bits 0–2 of a v2 batch.
pub fn codec_of(id: u8) -> Result<Compression, DecompressError> {
    match id {
        0 => Ok(Compression::None),
        1 => Ok(Compression::Gzip),
        2 => Ok(Compression::Snappy),
        3 => Ok(Compression::Lz4),
        4 => Ok(Compression::Zstd),
        other => Err(DecompressError::UnknownCodec(other)),
    }
}

/// A reader that fails with [`DecompressError::TooLarge`] (wrapped in an
/// `io::Error`) once more than `limit` bytes have come out of `inner`.
struct Limited<R> {
    inner: R,
    left: usize,
    limit: usize,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // Ask for one byte more than allowed, so "exactly at the limit" and
        // "over it" can be told apart.
        let want = buf.len().min(self.left.saturating_add(1));
        let n = self.inner.read(&mut buf[..want])?;
        if n > self.left {
            return Err(io::Error::other(DecompressError::TooLarge {
                limit: self.limit,
            }));
        }
        self.left -= n;
        Ok(n)
    }
}

/// Turns an error from a [`decoder`] read into the matching kind.
pub fn classify(e: io::Error) -> DecompressError {
    let message = e.to_string();
    match e
        .into_inner()
        .map(|inner| inner.downcast::<DecompressError>())
    {
        Some(Ok(known)) => *known,
        _ => DecompressError::Corrupt(message),
    }
}

/// A streaming reader of the decompressed form of `compressed`, failing once
/// it would yield more than `limit` bytes. `Compression::None` reads the
/// bytes as they are (still limited).
pub fn decoder<'a>(
    compressed: &'a [u8],
    codec: Compression,
    limit: usize,
) -> Result<Box<dyn Read + 'a>, DecompressError> {
    let inner: Box<dyn Read + 'a> = match codec {
        Compression::None => Box::new(compressed),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(compressed)),
        Compression::Snappy => Box::new(SnappyReader::new(compressed, limit)),
        Compression::Lz4 => Box::new(Lz4Frame::new(compressed)?),
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(compressed)
                .map_err(|e| DecompressError::Corrupt(format!("zstd: {e}")))?,
        ),
    };
    Ok(Box::new(Limited {
        inner,
        left: limit,
        limit,
    }))
}

/// Decompresses all of `compressed` (at most `limit` bytes out).
pub fn decompress_all(
    compressed: &[u8],
    codec: Compression,
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    decoder(compressed, codec, limit)?
        .read_to_end(&mut out)
        .map_err(classify)?;
    Ok(out)
}

/// The decompressor `RecordBatchDecoder::decode_with_custom_compression`
/// takes, bounded by [`MAX_DECOMPRESSED_BATCH_BYTES`].
pub fn decompress(compressed: &mut Bytes, codec: Compression) -> anyhow::Result<Bytes> {
    let out = decompress_all(compressed, codec, MAX_DECOMPRESSED_BATCH_BYTES)?;
    Ok(Bytes::from(out))
}

/// An lz4 frame (Kafka's lz4 codec since message format v1 fixed its
/// header checksum) decoded by liblz4's frame API straight from the
/// batch's bytes.
///
/// The `lz4` crate's `Decoder` reads its input through a 32 KiB buffer:
/// a 64 KiB block that compresses to more than what is left of that
/// buffer is copied into liblz4's own staging buffer before it is
/// decoded, and its output copied once more. Here all of the payload is
/// the input, so each block is decoded once, straight into the caller's
/// buffer when it has room for a whole block (the record walk reads
/// 64 KiB at a time, librdkafka's and the Java client's block size).
/// Checksums are verified when the frame has them, as before; a frame
/// that ends before its end mark is corrupt, as in Kafka; bytes after the
/// end mark are not read.
struct Lz4Frame<'a> {
    context: lz4::liblz4::LZ4FDecompressionContext,
    rest: &'a [u8],
    ended: bool,
}

impl<'a> Lz4Frame<'a> {
    fn new(compressed: &'a [u8]) -> Result<Self, DecompressError> {
        let mut context = lz4::liblz4::LZ4FDecompressionContext(std::ptr::null_mut());
        // SAFETY: `context` is a valid out-pointer for the new context,
        // freed exactly once in `Drop`.
        let code = unsafe {
            lz4::liblz4::LZ4F_createDecompressionContext(&mut context, lz4::liblz4::LZ4F_VERSION)
        };
        lz4::liblz4::check_error(code)
            .map_err(|e| DecompressError::Corrupt(format!("lz4: {e}")))?;
        Ok(Self {
            context,
            rest: compressed,
            ended: false,
        })
    }
}

impl Read for Lz4Frame<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while !self.ended && !buf.is_empty() {
            let mut written = buf.len();
            let mut taken = self.rest.len();
            // SAFETY: the context is live (freed only in `Drop`); `buf` and
            // `rest` are valid for `written` and `taken` bytes, and liblz4
            // writes and reads no more than that, reporting how much it did
            // in the same variables.
            let hint = unsafe {
                lz4::liblz4::LZ4F_decompress(
                    self.context,
                    buf.as_mut_ptr(),
                    &mut written,
                    self.rest.as_ptr(),
                    &mut taken,
                    std::ptr::null(),
                )
            };
            let hint = lz4::liblz4::check_error(hint)
                .map_err(|e| io::Error::other(format!("lz4: {e}")))?;
            self.rest = self.rest.get(taken..).unwrap_or_default();
            self.ended = hint == 0;
            if written > 0 {
                return Ok(written);
            }
            if !self.ended && self.rest.is_empty() {
                return Err(io::Error::other("lz4: the frame ends before its end mark"));
            }
            if taken == 0 {
                return Err(io::Error::other("lz4: the decoder made no progress"));
            }
        }
        Ok(0)
    }
}

impl Drop for Lz4Frame<'_> {
    fn drop(&mut self) {
        // SAFETY: created in `new`, freed once, here.
        unsafe {
            lz4::liblz4::LZ4F_freeDecompressionContext(self.context);
        }
    }
}

const SNAPPY_XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
/// Magic (8 bytes) + version (4) + minimum compatible version (4).
const SNAPPY_XERIAL_HEADER_LEN: usize = 16;

/// Streams the blocks of a xerial-framed (or raw) snappy payload, one block
/// decompressed at a time; a block's claimed size is checked by
/// `snap::raw::decompress_len` against what a block may hold.
struct SnappyReader<'a> {
    rest: &'a [u8],
    raw: bool,
    block: Vec<u8>,
    pos: usize,
    started: bool,
    limit: usize,
}

impl<'a> SnappyReader<'a> {
    fn new(input: &'a [u8], limit: usize) -> Self {
        let framed =
            input.len() >= SNAPPY_XERIAL_HEADER_LEN && input.starts_with(SNAPPY_XERIAL_MAGIC);
        Self {
            rest: if framed {
                &input[SNAPPY_XERIAL_HEADER_LEN..]
            } else {
                input
            },
            raw: !framed,
            block: Vec::new(),
            pos: 0,
            started: false,
            limit,
        }
    }

    /// Decompresses the next block into `self.block`; `false` at the end.
    fn next_block(&mut self) -> io::Result<bool> {
        let compressed = if self.raw {
            if self.started {
                return Ok(false);
            }
            std::mem::take(&mut self.rest)
        } else {
            if self.rest.is_empty() {
                return Ok(false);
            }
            let Some((len, after)) = self.rest.split_first_chunk::<4>() else {
                return Err(io::Error::other("snappy: truncated block length"));
            };
            let len = u32::from_be_bytes(*len) as usize;
            if len > after.len() {
                return Err(io::Error::other("snappy: block runs past the payload"));
            }
            let (block, rest) = after.split_at(len);
            self.rest = rest;
            block
        };
        self.started = true;
        let size = snap::raw::decompress_len(compressed)
            .map_err(|e| io::Error::other(format!("snappy: {e}")))?;
        // Checked before allocating: a block larger than the whole limit,
        // or larger than snappy can expand its input (a 3-byte copy yields
        // at most 64 bytes), is refused.
        if size > self.limit {
            return Err(io::Error::other(DecompressError::TooLarge {
                limit: self.limit,
            }));
        }
        if size > compressed.len().saturating_mul(22).saturating_add(64) {
            return Err(io::Error::other("snappy: block claims an impossible size"));
        }
        self.block.clear();
        self.block.resize(size, 0);
        let n = snap::raw::Decoder::new()
            .decompress(compressed, &mut self.block)
            .map_err(|e| io::Error::other(format!("snappy: {e}")))?;
        self.block.truncate(n);
        self.pos = 0;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).unwrap()
    }

    fn lz4(data: &[u8]) -> Vec<u8> {
        let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        e.write_all(data).unwrap();
        let (out, r) = e.finish();
        r.unwrap();
        out
    }

    fn snappy_xerial(data: &[u8]) -> Vec<u8> {
        let mut out = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        for chunk in data.chunks(32 * 1024) {
            let block = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            out.extend_from_slice(&(block.len() as u32).to_be_bytes());
            out.extend_from_slice(&block);
        }
        out
    }

    #[test]
    fn every_codec_round_trips_within_the_limit() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for (codec, compressed) in [
            (Compression::None, data.clone()),
            (Compression::Gzip, gzip(&data)),
            (Compression::Zstd, zstd(&data)),
            (Compression::Lz4, lz4(&data)),
            (Compression::Snappy, snappy_xerial(&data)),
            (
                Compression::Snappy,
                snap::raw::Encoder::new().compress_vec(&data).unwrap(),
            ),
        ] {
            let out = decompress_all(&compressed, codec, data.len()).expect("decompresses");
            assert_eq!(out, data, "{codec:?}");
        }
    }

    #[test]
    fn a_bomb_is_refused_at_the_limit_for_every_codec() {
        // 16 MiB of zeros compresses to a few KiB in every codec.
        let zeros = vec![0u8; 16 << 20];
        for (codec, compressed) in [
            (Compression::None, zeros.clone()),
            (Compression::Gzip, gzip(&zeros)),
            (Compression::Zstd, zstd(&zeros)),
            (Compression::Lz4, lz4(&zeros)),
            (Compression::Snappy, snappy_xerial(&zeros)),
        ] {
            let limit = 1 << 20;
            match decompress_all(&compressed, codec, limit) {
                Err(DecompressError::TooLarge { limit: l }) => assert_eq!(l, limit),
                other => panic!("{codec:?}: expected TooLarge, got {other:?}"),
            }
        }
    }

    #[test]
    fn garbage_and_lying_sizes_are_errors_not_allocations() {
        for codec in [
            Compression::Gzip,
            Compression::Zstd,
            Compression::Lz4,
            Compression::Snappy,
        ] {
            for input in [&b"garbage garbage garbage"[..], &[0xff; 64]] {
                assert!(
                    decompress_all(input, codec, 1 << 20).is_err(),
                    "{codec:?} {input:?}"
                );
            }
        }
        // A raw snappy block whose varint length claims 4 GiB.
        let lying = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(decompress_all(&lying, Compression::Snappy, usize::MAX).is_err());
        // A xerial block length running past the payload.
        let mut framed = snappy_xerial(b"hello");
        framed.truncate(framed.len() - 2);
        assert!(decompress_all(&framed, Compression::Snappy, 1 << 20).is_err());
    }

    /// An lz4 frame as librdkafka and the Java client write it:
    /// independent 64 KiB blocks, no checksums.
    fn lz4_as_producers_frame_it(data: &[u8]) -> Vec<u8> {
        let mut e = lz4::EncoderBuilder::new()
            .block_size(lz4::BlockSize::Max64KB)
            .block_mode(lz4::BlockMode::Independent)
            .checksum(lz4::ContentChecksum::NoChecksum)
            .block_checksum(lz4::liblz4::BlockChecksum::NoBlockChecksum)
            .build(Vec::new())
            .unwrap();
        e.write_all(data).unwrap();
        let (out, r) = e.finish();
        r.unwrap();
        out
    }

    #[test]
    fn lz4_frames_decode_to_their_end_mark_and_no_further() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 13 + i / 1000) as u8).collect();
        for frame in [lz4(&data), lz4_as_producers_frame_it(&data)] {
            // Read in pieces smaller and larger than a block.
            for piece in [1000, 64 * 1024, 100_000] {
                let mut reader = decoder(&frame, Compression::Lz4, usize::MAX).unwrap();
                let mut out = Vec::new();
                let mut buf = vec![0; piece];
                loop {
                    let n = reader.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    out.extend_from_slice(&buf[..n]);
                }
                assert_eq!(out, data, "pieces of {piece}");
            }
            // Bytes after the end mark are not read (as Kafka's reader).
            let mut trailing = frame.clone();
            trailing.extend_from_slice(b"after the end mark");
            assert_eq!(
                decompress_all(&trailing, Compression::Lz4, usize::MAX).unwrap(),
                data
            );
            // A frame cut anywhere before its end mark is corrupt, also
            // where the cut falls between blocks (the last 4 bytes are the
            // end mark, or the content checksum after it).
            for cut in [1, 4, 5, frame.len() / 2, frame.len() - 7] {
                let short = &frame[..frame.len() - cut];
                assert!(
                    matches!(
                        decompress_all(short, Compression::Lz4, usize::MAX),
                        Err(DecompressError::Corrupt(_))
                    ),
                    "cut {cut}"
                );
            }
        }
        assert!(matches!(
            decompress_all(&[], Compression::Lz4, usize::MAX),
            Err(DecompressError::Corrupt(_))
        ));
    }

    #[test]
    fn codec_ids_map_like_kafka() {
        assert!(matches!(codec_of(0), Ok(Compression::None)));
        assert!(matches!(codec_of(4), Ok(Compression::Zstd)));
        assert!(matches!(codec_of(5), Err(DecompressError::UnknownCodec(5))));
    }
}
