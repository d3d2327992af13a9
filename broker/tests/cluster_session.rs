//! Cluster mode's first step, end to end on 127.0.0.1: two real brokers
//! register with a controller over gRPC and serve its metadata image to
//! Kafka clients — Metadata from either broker lists both brokers, the
//! controller, and each partition's leader, replicas, ISR and leader
//! epoch. When one broker stops, the controller fences it after the
//! session timeout and the other broker's Metadata shows the moved leader.
//! (Local partition logs do not follow roles yet: see the session module.)

mod wire_common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
use moldau_broker::controller::leadership::PartitionState;
use moldau_broker::controller::rpc::pb::controller_server::ControllerServer;
use moldau_broker::controller::rpc::{ControllerService, ControllerSettings};
use uuid::Uuid;
use wire_common::*;

const SESSION_MS: i64 = 9_000;

/// `(live broker ids, controller id, [(partition, leader, epoch, replicas, isr)])`
type View = (Vec<i32>, i32, Vec<(i32, i32, i32, Vec<i32>, Vec<i32>)>);

async fn view(b: &Running, topic_id: Uuid) -> View {
    let mut s = b.connect().await;
    let m: MetadataResponse = call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    )
    .await;
    let mut brokers: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
    brokers.sort();
    let mut parts = Vec::new();
    for t in m.topics.iter().filter(|t| t.topic_id == topic_id) {
        for p in &t.partitions {
            let ids = |v: &Vec<kafka_protocol::messages::BrokerId>| v.iter().map(|b| b.0).collect();
            parts.push((
                p.partition_index,
                p.leader_id.0,
                p.leader_epoch,
                ids(&p.replica_nodes),
                ids(&p.isr_nodes),
            ));
        }
    }
    parts.sort();
    (brokers, m.controller_id.0, parts)
}

async fn wait_for(b: &Running, topic_id: Uuid, want: &View) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = view(b, topic_id).await;
        if &got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metadata never became {want:?}; last {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_serve_the_controllers_image_and_see_a_failover() {
    let topic_id = Uuid::new_v4();
    let partition = |index: i32, replicas: &[i32]| PartitionState {
        topic: "orders".into(),
        topic_id,
        index,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        leader: replicas[0],
        leader_epoch: 0,
        partition_epoch: 0,
    };
    let now = Arc::new(AtomicI64::new(5_000_000));
    let clock = now.clone();
    let service = ControllerService::new(
        ControllerSettings {
            cluster_id: "one-cluster".into(),
            controller_id: 0,
            controller_epoch: 1,
            session_timeout_ms: SESSION_MS,
            clock: Arc::new(move || clock.load(Ordering::SeqCst)),
            unclean_topics: BTreeSet::new(),
        },
        vec![partition(0, &[0, 1]), partition(1, &[1, 0])],
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let controller = format!("http://{}", listener.local_addr().unwrap());
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let grpc = service.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ControllerServer::new(grpc))
            .serve_with_incoming(incoming)
            .await
    });

    let (dir0, dir1) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cluster = |node: &'static str| {
        [
            "--node-id",
            node,
            "--controller-address",
            Box::leak(controller.clone().into_boxed_str()),
            "--set",
            "broker.heartbeat.interval.ms=50",
        ]
    };
    let b0 = start(dir0.path(), &cluster("0")).await;
    let b1 = start(dir1.path(), &cluster("1")).await;

    let both: View = (
        vec![0, 1],
        0,
        vec![
            (0, 0, 0, vec![0, 1], vec![0, 1]),
            (1, 1, 0, vec![1, 0], vec![1, 0]),
        ],
    );
    wait_for(&b0, topic_id, &both).await;
    wait_for(&b1, topic_id, &both).await;
    {
        let mut s = b1.connect().await;
        let m: MetadataResponse = call(
            &mut s,
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(None),
        )
        .await;
        assert_eq!(
            m.cluster_id.as_ref().map(|c| c.as_str()),
            Some("one-cluster"),
            "both brokers report the controller's cluster id"
        );
    }

    // Broker 1 stops; after the session timeout the controller fences it
    // and broker 0 leads partition 1 in a new leader epoch.
    b1.stop().await;
    now.fetch_add(SESSION_MS + 1, Ordering::SeqCst);
    // broker 0 keeps heartbeating on its own; give it a beat at the new time
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(service.tick(), vec![1]);
    let after: View = (
        vec![0],
        0,
        vec![
            (0, 0, 0, vec![0, 1], vec![0]),
            (1, 0, 1, vec![1, 0], vec![0]),
        ],
    );
    wait_for(&b0, topic_id, &after).await;
    b0.stop().await;
}
