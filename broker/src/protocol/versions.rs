//! The API versions this broker implements — and advertises in
//! ApiVersions. Nothing is listed here unless its handler really serves
//! every version in the range.

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
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::ElectLeaders, 0, 2),
];

/// The supported range of `api`, if it is implemented at all.
pub fn supported_range(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == api)
        .map(|(_, min, max)| (*min, *max))
}

#[cfg(test)]
mod tests {
    use super::*;

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
