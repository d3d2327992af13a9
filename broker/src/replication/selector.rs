//! KIP-392: which replica a consumer reads from. With
//! `replica.selector.class` set to Kafka's `RackAwareReplicaSelector`
//! (`config::RACK_AWARE_SELECTOR`), a
//! leader sends a consumer that names its rack (`client.rack`) to an
//! in-sync replica in that rack, and followers serve consumers' fetches
//! below their own high watermark. A pure decision over the image.

use crate::image::{BrokerImage, PartitionImage};

/// The replica a consumer in `client_rack` should read `p` from, when that
/// is not the leader: an in-sync replica on a live broker of the same rack
/// (the lowest id, so every consumer of a rack gets the same). `None`: the
/// leader (no rack given, the leader is in it, or no in-sync replica is).
pub fn preferred_read_replica(
    p: &PartitionImage,
    brokers: &[BrokerImage],
    client_rack: &str,
) -> Option<i32> {
    if client_rack.is_empty() {
        return None;
    }
    let rack_of = |id: i32| {
        brokers
            .iter()
            .find(|b| b.id == id)
            .and_then(|b| b.rack.as_deref())
    };
    if rack_of(p.leader) == Some(client_rack) {
        return None;
    }
    let mut candidates: Vec<i32> = p
        .isr
        .iter()
        .copied()
        .filter(|r| *r != p.leader && rack_of(*r) == Some(client_rack))
        .collect();
    candidates.sort_unstable();
    candidates.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(id: i32, rack: Option<&str>) -> BrokerImage {
        BrokerImage {
            id,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: rack.map(str::to_string),
            endpoints: vec![],
            incarnation: None,
        }
    }

    #[test]
    fn a_consumer_reads_from_an_in_sync_replica_of_its_rack() {
        let brokers = vec![
            broker(1, Some("a")),
            broker(2, Some("b")),
            broker(3, Some("b")),
            broker(4, None),
        ];
        let p = PartitionImage {
            index: 0,
            replicas: vec![1, 3, 2],
            leader: 1,
            leader_epoch: 0,
            isr: vec![1, 3, 2],
            partition_epoch: 0,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        assert_eq!(
            preferred_read_replica(&p, &brokers, "b"),
            Some(2),
            "lowest id of the rack"
        );
        assert_eq!(
            preferred_read_replica(&p, &brokers, "a"),
            None,
            "the leader's rack"
        );
        assert_eq!(
            preferred_read_replica(&p, &brokers, ""),
            None,
            "no rack given"
        );
        assert_eq!(
            preferred_read_replica(&p, &brokers, "c"),
            None,
            "no replica there"
        );
        // out of sync replicas are not read from
        let lagging = PartitionImage {
            isr: vec![1, 3],
            ..p.clone()
        };
        assert_eq!(preferred_read_replica(&lagging, &brokers, "b"), Some(3));
        let none = PartitionImage { isr: vec![1], ..p };
        assert_eq!(preferred_read_replica(&none, &brokers, "b"), None);
    }
}
