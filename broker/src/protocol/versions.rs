//! The API versions this broker implements — and advertises in
//! ApiVersions. Nothing is listed here unless its handler really serves
//! every version in the range. One advertised range is wider than the
//! served one, as in Kafka 4: Produce, for librdkafka's compression check
//! (see [`advertised_range`]).

use kafka_protocol::messages::ApiKey;

/// `(api, min version, max version)` of every implemented API.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    // v5 with transaction version 2 (the offsets partition added by the
    // commit itself)
    (ApiKey::TxnOffsetCommit, 0, 4),
    // v5 (transaction version 2, the epoch bumped by each end) once the
    // broker advertises transaction.version 2
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::DescribeTransactions, 0, 0),
    // v2's transactional id pattern (a regular expression) is not served
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::WriteTxnMarkers, 1, 1),
];

/// The supported range of `api`, if it is implemented at all: the
/// versions a request may use (others close the connection).
pub fn supported_range(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == api)
        .map(|(_, min, max)| (*min, *max))
}

/// The range ApiVersions advertises for `api`, served as `(min, max)`.
///
/// Produce is advertised from version 0 though only 3 and up are served,
/// as Kafka 4 does (KAFKA-18659): librdkafka before its fix decides
/// whether the broker takes a compression codec by asking whether Produce
/// v0 is in the advertised range, and without it sends every batch
/// uncompressed (gzip, snappy and lz4; zstd asks for v7) — kcat, the
/// librdkafka in Debian and the `rdkafka` crate's bundled one included. A
/// Produce request below v3 still closes the connection, as on Kafka 4.1;
/// the clients that rely on this range send v3 or later (message format
/// v2 needs it).
pub fn advertised_range(api: ApiKey, served: (i16, i16)) -> (i16, i16) {
    match api {
        ApiKey::Produce => (0, served.1),
        _ => served,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_is_advertised_from_v0_but_served_from_v3() {
        let served = supported_range(ApiKey::Produce).unwrap();
        assert_eq!(served.0, 3);
        assert_eq!(advertised_range(ApiKey::Produce, served), (0, served.1));
        let fetch = supported_range(ApiKey::Fetch).unwrap();
        assert_eq!(advertised_range(ApiKey::Fetch, fetch), fetch);
    }

    #[test]
    fn every_advertised_range_is_one_the_codec_can_handle() {
        for (api, min, max) in SUPPORTED {
            let codec = api.valid_versions();
            assert!(min <= max, "{api:?}");
            assert!(
                codec.min <= *min && *max <= codec.max,
                "{api:?} {min}..{max} vs codec {codec}"
            );
        }
    }
}
