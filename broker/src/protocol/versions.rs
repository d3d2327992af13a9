//! The API versions this broker implements — and advertises in
//! ApiVersions. Nothing is listed here unless its handler really serves
//! every version in the range. One advertised range is wider than the
//! served one, as in Kafka 4: Produce, for librdkafka's compression check
//! (see [`advertised_range`]).

use kafka_protocol::messages::ApiKey;

/// `(api, min version, max version)` of every implemented API.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    // v12: a transaction version 2 client's transactional batch adds its
    // partition to the transaction (KIP-890 part 2)
    (ApiKey::Produce, 3, 12),
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
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // Kafka 4's versions: v0 (no pattern type) was removed in Kafka 4
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    // v9: the first versions for KIP-848 consumer group members (member
    // id and epoch)
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    // KIP-848 consumer groups (`group.version` 1), see `crate::group::consumer`
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    // v5: transaction version 2 (the offsets partition added by the commit
    // itself); v6's topic ids (KIP-1319) are not served
    (ApiKey::TxnOffsetCommit, 0, 5),
    // v5: transaction version 2 (the epoch bumped by each end)
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    // v2: the transactional id pattern (KIP-1152)
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::ElectLeaders, 0, 2),
    // v2 (KIP-1228) carries the transaction's version
    (ApiKey::WriteTxnMarkers, 1, 2),
    // validation only: Moldau's feature levels do not change at run time
    (ApiKey::UpdateFeatures, 0, 2),
    // the controller's view in place of a Raft quorum's
    (ApiKey::DescribeQuorum, 0, 2),
    // client telemetry (KIP-714), see `crate::telemetry`
    (ApiKey::GetTelemetrySubscriptions, 0, 0),
    (ApiKey::PushTelemetry, 0, 0),
    // v0: client-metrics resources only (KIP-714's ListClientMetricsResources)
    (ApiKey::ListConfigResources, 0, 0),
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
///
/// SaslHandshake is advertised from version 0 too, as Kafka advertises it:
/// librdkafka before 2.x enables SASL at all only if the range holds v0
/// (its "SASL handshake" feature), and then, seeing v1 and
/// SaslAuthenticate, sends v1 — the only version served (v0's unframed
/// tokens are not: such a request closes the connection). Without it,
/// kcat and Debian's librdkafka fail with "SASL Handshake not supported
/// by broker".
pub fn advertised_range(api: ApiKey, served: (i16, i16)) -> (i16, i16) {
    match api {
        ApiKey::Produce | ApiKey::SaslHandshake => (0, served.1),
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
        let sasl = supported_range(ApiKey::SaslHandshake).unwrap();
        assert_eq!(advertised_range(ApiKey::SaslHandshake, sasl), (0, 1));
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
