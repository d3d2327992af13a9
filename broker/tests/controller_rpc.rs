//! The controller's gRPC protocol over real gRPC on 127.0.0.1: brokers
//! register and heartbeat; a second process with a live node id is refused
//! with a clear error; a silent broker is fenced after the session timeout
//! and what it led moves to an in-sync replica; when it comes back with a
//! new incarnation it rejoins and its leaderless partitions return. Every
//! decision is persisted (a new term resumes from it); admin changes
//! forwarded by brokers are placed over the live brokers with Kafka's
//! error codes for refusals; a controller whose store was taken over by a
//! newer term writes nothing more and steps down.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use moldau_broker::controller::cluster::CreateDefaults;
use moldau_broker::controller::rpc::pb;
use moldau_broker::controller::rpc::pb::controller_client::ControllerClient;
use moldau_broker::controller::rpc::pb::controller_server::ControllerServer;
use moldau_broker::controller::rpc::pb::{
    FetchMetadataRequest, FetchMetadataResponse, HeartbeatRequest, RegisterRequest,
};
use moldau_broker::controller::rpc::{ControllerService, ControllerSettings};
use moldau_broker::controller::store::{ClusterStore, DirStore};
use moldau_coordination::records::{PartitionRecord, TopicRecord};
use tonic::transport::Channel;
use uuid::Uuid;

const SESSION_MS: i64 = 9_000;

fn partition(index: i32, replicas: &[i32], leader: i32) -> PartitionRecord {
    PartitionRecord {
        index,
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        leader,
        leader_epoch: 0,
        partition_epoch: 0,
        adding_replicas: vec![],
        removing_replicas: vec![],
        eligible_leader_replicas: vec![],
    }
}

fn orders() -> TopicRecord {
    TopicRecord {
        name: "orders".into(),
        topic_id: Uuid::new_v4().to_string(),
        replication_factor: 2,
        configs: Default::default(),
        partitions: vec![partition(0, &[0, 1], 0), partition(1, &[1, 0], 1)],
    }
}

fn settings(now: &Arc<AtomicI64>) -> ControllerSettings {
    let clock_now = now.clone();
    ControllerSettings {
        controller_id: 0,
        session_timeout_ms: SESSION_MS,
        takeover_grace_ms: 1_000,
        clock: Arc::new(move || clock_now.load(Ordering::SeqCst)),
        defaults: CreateDefaults {
            num_partitions: 1,
            replication_factor: 1,
        },
        delete_topic_enable: true,
        leader_rebalance_interval_ms: None,
    }
}

async fn serve(service: ControllerService) -> ControllerClient<Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ControllerServer::new(service))
            .serve_with_incoming(incoming)
            .await
    });
    ControllerClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
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
                succession_token: String::new(),
                // as an older broker registers: its one address only
                endpoints: vec![],
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
                wait_ms: 0,
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
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = DirStore::take_over(dir.path(), 0, "http://127.0.0.1:1").unwrap();
    first.put_topic(&orders(), None).await.unwrap();
    let (store, resumed) = DirStore::take_over(dir.path(), 0, "http://127.0.0.1:1").unwrap();
    let service = ControllerService::resume(settings(&now), Arc::new(store), resumed);
    let mut client = serve(service.clone()).await;

    let mut b0 = Broker::join(&mut client, 0).await.unwrap();
    let mut b1 = Broker::join(&mut client, 1).await.unwrap();
    assert_ne!(b0.epoch, b1.epoch, "broker epochs are unique");
    assert!(!b0.beat(&mut client).await.unwrap(), "in service");
    let m = b0.fetch(&mut client).await;
    assert!(m.changed);
    assert_eq!(m.controller_epoch, 2, "the second term");
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
    assert!(service.tick().await.is_empty(), "not yet");
    now.fetch_add(SESSION_MS / 2 + 1, Ordering::SeqCst);
    b1.beat(&mut client).await.unwrap();
    assert_eq!(service.tick().await, vec![0]);
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
    assert_eq!(service.topics().await[0].partitions.len(), 2);

    // What the term decided is persisted: a new term resumes from it.
    let (_, resumed) = DirStore::take_over(dir.path(), 1, "http://127.0.0.1:2").unwrap();
    assert_eq!(resumed.epoch, 3);
    let p0 = &resumed.topics[0].0.partitions[0];
    assert_eq!(
        (p0.leader, p0.leader_epoch, p0.isr.clone()),
        (1, 1, vec![1])
    );
    let mut registered: Vec<(i32, bool)> = resumed
        .cluster
        .brokers
        .iter()
        .map(|b| (b.node_id, b.fenced))
        .collect();
    registered.sort();
    assert_eq!(registered, vec![(0, false), (1, false)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_changes_are_placed_persisted_and_refused_once_deposed() {
    let now = Arc::new(AtomicI64::new(1_000_000));
    let dir = tempfile::tempdir().unwrap();
    let (store, resumed) = DirStore::take_over(dir.path(), 0, "http://127.0.0.1:1").unwrap();
    let service = ControllerService::resume(settings(&now), Arc::new(store), resumed);
    let mut client = serve(service.clone()).await;
    for id in 0..3 {
        Broker::join(&mut client, id).await.unwrap();
    }
    let create = |name: &str, partitions: i32, rf: i32| pb::CreateTopicRequest {
        name: name.into(),
        partitions,
        replication_factor: rf,
        ..Default::default()
    };
    let r = client
        .create_topic(create("spread", 12, 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error_code, 0, "{}", r.message);
    assert!(Uuid::parse_str(&r.topic_id).is_ok());
    let mut b = Broker {
        node_id: 0,
        incarnation: Uuid::nil(),
        epoch: 0,
        offset: 0,
    };
    let m = b.fetch(&mut client).await;
    assert!(m.metadata_offset >= r.metadata_offset);
    let mut per_leader = std::collections::BTreeMap::new();
    for p in m.partitions.iter().filter(|p| p.topic == "spread") {
        *per_leader.entry(p.leader).or_insert(0) += 1;
    }
    assert_eq!(per_leader, [(0, 4), (1, 4), (2, 4)].into());
    // Kafka's codes for refusals
    let r = client
        .create_topic(create("spread", 1, 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error_code, 36, "TOPIC_ALREADY_EXISTS");
    let r = client
        .create_topic(create("big", 1, 4))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.error_code, 38,
        "INVALID_REPLICATION_FACTOR: {}",
        r.message
    );
    let r = client
        .create_partitions(pb::CreatePartitionsRequest {
            name: "spread".into(),
            count: 15,
            validate_only: false,
            assignments: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error_code, 0, "{}", r.message);
    let r = client
        .alter_topic_configs(pb::AlterTopicConfigsRequest {
            name: "spread".into(),
            configs: [("retention.ms".to_string(), "60000".to_string())].into(),
            validate_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error_code, 0, "{}", r.message);
    let m = b.fetch(&mut client).await;
    assert_eq!(
        m.partitions.iter().filter(|p| p.topic == "spread").count(),
        15
    );
    assert_eq!(m.topic_configs[0].configs["retention.ms"], "60000");
    let ids = client
        .allocate_producer_ids(pb::AllocateProducerIdsRequest {
            node_id: 0,
            broker_epoch: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((ids.first, ids.count), (0, 1000));

    // A newer term takes the store over: this one is refused at its next
    // write, steps down, and refuses everything after.
    let (_, newer) = DirStore::take_over(dir.path(), 1, "http://127.0.0.1:2").unwrap();
    assert_eq!(newer.topics[0].0.partitions.len(), 15, "persisted");
    assert_eq!(newer.cluster.producer_id_block_end, 1000);
    let mut deposed = service.deposed();
    let r = client
        .create_topic(create("late", 1, 1))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(r.error_code, 0);
    deposed.wait_for(|d| *d).await.unwrap();
    let refused = client
        .create_topic(create("later", 1, 1))
        .await
        .expect_err("deposed");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    let (_, after) = DirStore::take_over(dir.path(), 1, "x").unwrap();
    assert!(
        after.topics.iter().all(|(t, _)| t.name == "spread"),
        "the deposed controller wrote nothing"
    );
}
