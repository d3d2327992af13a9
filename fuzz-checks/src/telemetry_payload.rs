//! Fuzz check `telemetry_payload`: a PushTelemetry payload (KIP-714)
//! through the broker's decoding of it.
//!
//! Input: one compression type byte (taken modulo 5: none, gzip, snappy,
//! lz4, zstd), then the payload bytes (seeds: an OTLP `MetricsData`,
//! plain and compressed with each codec).
//!
//! Exercises `moldau_broker::telemetry::decode_payload`: bounded
//! decompression, prost decoding of the hand-written OTLP messages
//! (`telemetry::otlp`) and their flattening into samples.
//!
//! Asserts: no panic, abort or out-of-memory (a decompression bomb or a
//! lying length is a crash under the allocation limits); errors are
//! INVALID_RECORD; at most one sample more than the per-client cap comes
//! out, so a payload cannot make the broker hold more.

use kafka_protocol::error::ResponseError;
use moldau_broker::telemetry::{decode_payload, MAX_SERIES_PER_CLIENT};

pub fn run(data: &[u8]) {
    let Some((&codec, payload)) = data.split_first() else {
        return;
    };
    match decode_payload((codec % 5) as i8, payload) {
        Ok(samples) => assert!(samples.len() <= MAX_SERIES_PER_CLIENT + 1),
        Err(e) => assert_eq!(e.code, ResponseError::InvalidRecord),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed seeds are well-formed: with every codec, the same
    /// gauge, sum and histogram (count and sum) come out.
    #[test]
    fn every_seed_decodes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus/telemetry_payload");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            let samples = decode_payload(bytes[0] as i8, &bytes[1..]).unwrap();
            let names: Vec<&str> = samples.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(
                names,
                [
                    "org.apache.kafka.producer.node.request.latency.avg",
                    "org.apache.kafka.producer.record.send.total",
                    "org.apache.kafka.producer.latency.count",
                    "org.apache.kafka.producer.latency.sum",
                ]
            );
            seen += 1;
        }
        assert_eq!(seen, 5);
    }
}
