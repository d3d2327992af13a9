//! The controller's gRPC protocol over real gRPC on 127.0.0.1: brokers
//! register and heartbeat; a second process with a live node id is refused
//! with a clear error; a silent broker is fenced after the session timeout
//! and what it led moves to an in-sync replica; when it comes back with a
//! new incarnation it rejoins and its leaderless partitions return.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use moldau_broker::controller::leadership::PartitionState;
use moldau_broker::controller::rpc::pb::controller_client::ControllerClient;
use moldau_broker::controller::rpc::pb::controller_server::ControllerServer;
use moldau_broker::controller::rpc::pb::{
    FetchMetadataRequest, FetchMetadataResponse, HeartbeatRequest, RegisterRequest,
};
use moldau_broker::controller::rpc::{ControllerService, ControllerSettings};
use tonic::transport::Channel;
use uuid::Uuid;

const SESSION_MS: i64 = 9_000;

fn partition(index: i32, replicas: &[i32], leader: i32) -> PartitionState {
    PartitionState {
        topic: "orders".into(),
        topic_id: Uuid::nil(),
        index,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        leader,
        leader_epoch: 0,
        partition_epoch: 0,
    }
}

#[derive(Debug)]
struct Broker {
    node_id: i32,
    incarnation: Uuid,
    epoch: i64,
    offset: i64,
}

impl Broker {
    async fn join(
        client: &mut ControllerClient<Channel>,
        node_id: i32,
    ) -> Result<Broker, tonic::Status> {
        let incarnation = Uuid::new_v4();
        let epoch = client
            .register(RegisterRequest {
                node_id,
                incarnation: incarnation.to_string(),
                host: format!("127.0.0.{}", node_id + 10),
                port: 9092,
                rack: String::new(),
            })
            .await?
            .into_inner()
            .broker_epoch;
        let mut b = Broker {
            node_id,
            incarnation,
            epoch,
            offset: 0,
        };
        // catch up, then a heartbeat puts it in service
        b.fetch(client).await;
        b.beat(client).await.expect("first heartbeat");
        Ok(b)
    }

    async fn beat(
        &mut self,
        client: &mut ControllerClient<Channel>,
    ) -> Result<bool, tonic::Status> {
        let r = client
            .heartbeat(HeartbeatRequest {
                node_id: self.node_id,
                incarnation: self.incarnation.to_string(),
                broker_epoch: self.epoch,
                metadata_offset: self.offset,
            })
            .await?
            .into_inner();
        Ok(r.fenced)
    }

    async fn fetch(&mut self, client: &mut ControllerClient<Channel>) -> FetchMetadataResponse {
        let r = client
            .fetch_metadata(FetchMetadataRequest {
                node_id: self.node_id,
                metadata_offset: self.offset,
            })
            .await
            .expect("fetch")
            .into_inner();
        self.offset = r.metadata_offset;
        r
    }
}

fn leaders(m: &FetchMetadataResponse) -> Vec<(i32, i32, i32)> {
    let mut v: Vec<_> = m
        .partitions
        .iter()
        .map(|p| (p.index, p.leader, p.leader_epoch))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_register_heartbeat_are_fenced_and_rejoin_over_grpc() {
    let now = Arc::new(AtomicI64::new(1_000_000));
    let clock_now = now.clone();
    let service = ControllerService::new(
        ControllerSettings {
            cluster_id: "c1".into(),
            controller_id: 0,
            controller_epoch: 4,
            session_timeout_ms: SESSION_MS,
            clock: Arc::new(move || clock_now.load(Ordering::SeqCst)),
            unclean_topics: BTreeSet::new(),
        },
        vec![partition(0, &[0, 1], 0), partition(1, &[1, 0], 1)],
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server_service = service.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ControllerServer::new(server_service))
            .serve_with_incoming(incoming)
            .await
    });
    let mut client = ControllerClient::connect(format!("http://{addr}"))
        .await
        .unwrap();

    let mut b0 = Broker::join(&mut client, 0).await.unwrap();
    let mut b1 = Broker::join(&mut client, 1).await.unwrap();
    assert_ne!(b0.epoch, b1.epoch, "broker epochs are unique");
    assert!(!b0.beat(&mut client).await.unwrap(), "in service");
    let m = b0.fetch(&mut client).await;
    assert!(m.changed);
    assert_eq!(m.controller_epoch, 4);
    let mut live: Vec<i32> = m.brokers.iter().map(|b| b.node_id).collect();
    live.sort();
    assert_eq!(live, vec![0, 1]);
    assert_eq!(leaders(&m), vec![(0, 0, 0), (1, 1, 0)]);

    // A second process claiming node 1 while it is live: refused, clearly.
    let err = Broker::join(&mut client, 1).await.expect_err("refused");
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    assert!(err.message().contains("node id 1"), "{}", err.message());

    // Node 0 goes silent; node 1 keeps beating. After the session timeout
    // node 0 is fenced and partition 0 moves to node 1 (in its ISR).
    now.fetch_add(SESSION_MS / 2, Ordering::SeqCst);
    b1.beat(&mut client).await.unwrap();
    assert!(service.tick().is_empty(), "not yet");
    now.fetch_add(SESSION_MS / 2 + 1, Ordering::SeqCst);
    b1.beat(&mut client).await.unwrap();
    assert_eq!(service.tick(), vec![0]);
    let m = b1.fetch(&mut client).await;
    assert!(m.changed);
    assert_eq!(
        m.brokers.iter().map(|b| b.node_id).collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(leaders(&m), vec![(0, 1, 1), (1, 1, 0)], "leader epoch grew");
    let p0 = m.partitions.iter().find(|p| p.index == 0).unwrap();
    assert_eq!(p0.isr, vec![1], "the fenced broker left the ISR");
    // The old incarnation's heartbeats are refused once it was replaced.
    let restarted = Broker::join(&mut client, 0)
        .await
        .expect("rejoins after fencing");
    let stale = b0.beat(&mut client).await.expect_err("stale");
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition);
    assert!(restarted.epoch > b1.epoch);
    let m = b1.fetch(&mut client).await;
    let mut live: Vec<i32> = m.brokers.iter().map(|b| b.node_id).collect();
    live.sort();
    assert_eq!(live, vec![0, 1], "back in service");
    // Not in the ISR yet (replication will add it back): no leadership.
    assert_eq!(leaders(&m), vec![(0, 1, 1), (1, 1, 0)]);
    assert_eq!(service.partitions().len(), 2);
}
