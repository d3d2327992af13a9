//! `KubeMetadataStore` against a real API server (the e2e control plane):
//! take-over bumps the epoch and stamps every topic object; the API server
//! itself refuses a write of an older epoch (the CEL rule), a stale
//! resourceVersion loses the compare-and-swap, and hand-edited objects that
//! fail validation are reported and left alone.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use moldau_coordination::records::{PartitionRecord, TopicRecord};
use moldau_coordination::shard::{MetadataShard, MetadataShardSpec};
use moldau_coordination::store::{KubeMetadataStore, StoreError};
use moldau_e2e::{paths, TestNamespace};

const ADDR: &str = "http://127.0.0.1:9093";

/// Installs the CRDs from `crds/` (once per test process).
fn install_crd() -> Result<()> {
    static DONE: Mutex<bool> = Mutex::new(false);
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return Ok(());
    }
    moldau_e2e::ensure_control_plane()?;
    moldau_e2e::apply_repo_crds()?;
    *done = true;
    Ok(())
}

async fn setup(prefix: &str) -> Result<Option<(TestNamespace, KubeMetadataStore)>> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(None);
    }
    install_crd()?;
    let ns = TestNamespace::new(prefix).await?;
    let store = KubeMetadataStore::new(ns.client.clone(), &ns.name, "prod")?;
    Ok(Some((ns, store)))
}

fn topic(name: &str, partitions: i32) -> TopicRecord {
    TopicRecord {
        name: name.into(),
        topic_id: uuid::Uuid::new_v4().to_string(),
        replication_factor: 3,
        configs: BTreeMap::from([("retention.ms".to_string(), "60000".to_string())]),
        partitions: (0..partitions)
            .map(|i| PartitionRecord {
                index: i,
                replicas: vec![i % 3, (i + 1) % 3, (i + 2) % 3],
                isr: vec![i % 3, (i + 1) % 3],
                leader: i % 3,
                leader_epoch: 0,
                partition_epoch: 0,
                adding_replicas: vec![],
                removing_replicas: vec![],
                eligible_leader_replicas: vec![],
            })
            .collect(),
    }
}

#[tokio::test]
async fn take_over_twice_bumps_the_epoch_and_keeps_the_cluster_id() -> Result<()> {
    let Some((_ns, store)) = setup("coord-epoch").await? else {
        return Ok(());
    };
    assert!(store.read_cluster().await?.is_none());
    let first = store.take_over(0, "http://127.0.0.1:9000").await?;
    assert_eq!(first.epoch, 1);
    assert_eq!(first.cluster.cluster_id.len(), 22);
    assert_eq!(first.cluster.controller_id, 0);
    assert!(first.topics.is_empty() && first.invalid.is_empty());

    let second = store.take_over(1, ADDR).await?;
    assert_eq!(second.epoch, 2);
    assert_eq!(second.cluster.cluster_id, first.cluster.cluster_id);
    assert_eq!(second.cluster.controller_id, 1);
    assert_eq!(second.cluster.controller_address, ADDR);

    let read = store.read_cluster().await?.expect("the cluster object");
    assert_eq!(read.epoch, 2);
    assert_eq!(read.writer, 1);
    assert_eq!(read.record, second.cluster);
    assert_eq!(read.resource_version, second.cluster_resource_version);
    Ok(())
}

#[tokio::test]
async fn a_deposed_controller_is_refused_by_the_api_server() -> Result<()> {
    let Some((_ns, store)) = setup("coord-fence").await? else {
        return Ok(());
    };
    let old = store.take_over(0, "http://127.0.0.1:9000").await?;
    let mut orders = topic("Orders_v1", 3);
    let rv1 = store.put_topic(old.epoch, 0, &orders, None).await?;
    // Creating it again loses the CAS.
    assert!(matches!(
        store.put_topic(old.epoch, 0, &orders, None).await,
        Err(StoreError::Conflict { .. })
    ));

    let new = store.take_over(1, ADDR).await?;
    assert_eq!(new.epoch, old.epoch + 1);
    assert_eq!(new.topics.len(), 1);
    let (stamped, rv2) = &new.topics[0];
    assert_eq!(stamped, &orders);
    assert_ne!(rv2, &rv1, "take-over stamps every object");

    // The deposed controller, even with the current resourceVersion (as if
    // it had read after the stamp and then paused), is refused by the CEL
    // rule in the API server.
    orders.partitions[0].leader_epoch = 7;
    match store.put_topic(old.epoch, 0, &orders, Some(rv2)).await {
        Err(StoreError::Fenced { ours, theirs }) => {
            assert_eq!(ours, old.epoch);
            assert_eq!(theirs, Some(new.epoch));
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    match store
        .put_cluster(
            old.epoch,
            0,
            &old.cluster,
            Some(&new.cluster_resource_version),
        )
        .await
    {
        Err(StoreError::Fenced { .. }) => {}
        other => panic!("expected Fenced, got {other:?}"),
    }
    // With the resourceVersion it had before the take-over: the CAS fails.
    assert!(matches!(
        store.put_topic(old.epoch, 0, &orders, Some(&rv1)).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        store.delete_topic(&orders.name, &rv1).await,
        Err(StoreError::Conflict { .. })
    ));

    // The new controller writes with the current version; a stale version
    // loses the CAS.
    let rv3 = store.put_topic(new.epoch, 1, &orders, Some(rv2)).await?;
    assert!(matches!(
        store.put_topic(new.epoch, 1, &orders, Some(rv2)).await,
        Err(StoreError::Conflict { .. })
    ));
    let read = store.read_topic(&orders.name).await?.expect("the topic");
    assert_eq!(read.record, orders);
    assert_eq!((read.epoch, read.writer), (new.epoch, 1));
    assert_eq!(read.resource_version, rv3);
    store.delete_topic(&orders.name, &rv3).await?;
    assert!(store.read_topic(&orders.name).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn a_deposed_controllers_late_create_is_adopted_never_deleted() -> Result<()> {
    let Some((ns, store)) = setup("coord-orphan").await? else {
        return Ok(());
    };
    let first = store.take_over(0, ADDR).await?;
    let early = topic("early", 1);
    store.put_topic(first.epoch, 0, &early, None).await?;
    let second = store.take_over(1, ADDR).await?;
    assert!(second.adopted.is_empty());

    // The deposed controller (epoch 1) creates a topic after the take-over:
    // a create has no old object, so the CEL rule cannot refuse it.
    let late = topic("late", 1);
    store.put_topic(first.epoch, 0, &late, None).await?;
    let current = topic("current", 1);
    store.put_topic(second.epoch, 1, &current, None).await?;

    let third = store.take_over(2, ADDR).await?;
    let names: Vec<&str> = third.topics.iter().map(|(t, _)| t.name.as_str()).collect();
    assert_eq!(names, ["current", "early", "late"]);
    assert_eq!(
        third.adopted,
        vec![(store.topic_object_name("late"), first.epoch)]
    );
    assert!(third.invalid.is_empty());
    let late = store.read_topic("late").await?.expect("kept");
    assert_eq!(late.epoch, third.epoch, "stamped like the others");
    let cluster = ns.api::<MetadataShard>().get("prod-cluster").await?;
    assert_eq!(cluster.spec.stamped_epoch, Some(third.epoch));
    assert_eq!(
        cluster.metadata.resource_version.as_deref(),
        Some(third.cluster_resource_version.as_str())
    );
    Ok(())
}

#[tokio::test]
async fn the_api_server_enforces_the_shard_rules() -> Result<()> {
    let Some((ns, store)) = setup("coord-rules").await? else {
        return Ok(());
    };
    let snap = store.take_over(0, ADDR).await?;
    let t = topic("events", 1);
    store.put_topic(snap.epoch, 0, &t, None).await?;
    let api = ns.api::<MetadataShard>();
    let name = store.topic_object_name("events");
    let refused = |r: kube::Result<MetadataShard>, what: &str| match r {
        Err(kube::Error::Api(s)) if s.code == 422 => eprintln!("{what}: {}", s.message),
        other => panic!("{what}: expected 422, got {other:?}"),
    };

    let mut obj = api.get(&name).await?;
    obj.spec.topic.as_mut().unwrap().topic_id = uuid::Uuid::new_v4().to_string();
    refused(
        api.replace(&name, &PostParams::default(), &obj).await,
        "topicId change",
    );

    let mut obj = api.get(&name).await?;
    obj.spec.cluster = "other".into();
    refused(
        api.replace(&name, &PostParams::default(), &obj).await,
        "cluster change",
    );

    let mut obj = api.get(&name).await?;
    obj.spec.cluster_record = Some(snap.cluster.clone());
    refused(
        api.replace(&name, &PostParams::default(), &obj).await,
        "two payloads",
    );

    let none = MetadataShard::new(
        "prod-empty",
        MetadataShardSpec {
            cluster: "prod".into(),
            epoch: 1,
            writer: 0,
            cluster_record: None,
            topic: None,
            stamped_epoch: None,
        },
    );
    refused(
        api.create(&PostParams::default(), &none).await,
        "no payload",
    );
    Ok(())
}

#[tokio::test]
async fn hand_edited_invalid_objects_are_reported_and_left_alone() -> Result<()> {
    let Some((ns, store)) = setup("coord-invalid").await? else {
        return Ok(());
    };
    let snap = store.take_over(0, ADDR).await?;
    let good = topic("good", 2);
    let bad = topic("bad", 2);
    store.put_topic(snap.epoch, 0, &good, None).await?;
    store.put_topic(snap.epoch, 0, &bad, None).await?;

    // A hand edit the schema allows but the record's invariants do not: a
    // leader that is not a replica.
    let api = ns.api::<MetadataShard>();
    let bad_name = store.topic_object_name("bad");
    let mut obj = api.get(&bad_name).await?;
    obj.spec.topic.as_mut().unwrap().partitions[1].leader = 42;
    let edited = api.replace(&bad_name, &PostParams::default(), &obj).await?;
    let edited_rv = edited.metadata.resource_version.clone().unwrap();

    let next = store.take_over(1, ADDR).await?;
    assert_eq!(next.topics.len(), 1);
    assert_eq!(next.topics[0].0, good);
    assert_eq!(next.invalid.len(), 1, "{:?}", next.invalid);
    assert_eq!(next.invalid[0].0, bad_name);
    assert!(
        next.invalid[0].1.contains("not a replica"),
        "{:?}",
        next.invalid
    );

    let after = api.get(&bad_name).await?;
    assert_eq!(
        after.metadata.resource_version.as_deref(),
        Some(edited_rv.as_str())
    );
    assert_eq!(after.spec.epoch, snap.epoch, "not stamped");
    assert!(matches!(
        store.read_topic("bad").await,
        Err(StoreError::Invalid { .. })
    ));

    // A Warning Event on the object says why.
    let events = ns.api::<Event>().list(&ListParams::default()).await?.items;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("InvalidMetadata")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(bad_name.as_str())),
        "{events:?}"
    );
    Ok(())
}

#[tokio::test]
async fn take_over_stamps_every_topic_object() -> Result<()> {
    let Some((ns, store)) = setup("coord-stamp").await? else {
        return Ok(());
    };
    let first = store.take_over(0, ADDR).await?;
    let mut topics: Vec<TopicRecord> = (0..50).map(|i| topic(&format!("t.{i:02}_X"), 2)).collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    for t in &topics {
        store.put_topic(first.epoch, 0, t, None).await?;
    }
    let t0 = std::time::Instant::now();
    let second = store.take_over(2, ADDR).await?;
    eprintln!("take-over of 50 topic objects: {:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert!(second.invalid.is_empty(), "{:?}", second.invalid);
    let got: Vec<TopicRecord> = second.topics.iter().map(|(t, _)| t.clone()).collect();
    assert_eq!(got, topics);

    let objects = ns
        .api::<MetadataShard>()
        .list(&ListParams::default().labels("moldau.io/cluster=prod,moldau.io/shard=topic"))
        .await?
        .items;
    assert_eq!(objects.len(), 50);
    for o in &objects {
        assert_eq!(
            (o.spec.epoch, o.spec.writer),
            (second.epoch, 2),
            "{:?}",
            o.metadata.name
        );
    }
    Ok(())
}
