//! Cluster mode `kubernetes`: the controller term's [`ClusterStore`] over
//! the `MetadataShard` objects of `moldau_coordination::store`, and the
//! Lease election turned into the `bool` leadership the controller host
//! follows.
//!
//! Fencing has three layers: the elector's deadline (a holder acts only
//! until its last successful renewal plus the renew deadline, which ends
//! before anyone else may take the Lease), a check of that deadline before
//! every write here, and — for a controller paused between the check and
//! its write — the API server itself, which refuses a write carrying an
//! older epoch than the object's (the CRD's CEL rule) on every object the
//! new controller stamped when it took over.

use std::sync::Arc;
use std::time::Instant;

use moldau_coordination::lease::Elector;
use moldau_coordination::records::{ClusterRecord, TopicRecord};
use moldau_coordination::store::{KubeMetadataStore, StoreError as KubeError};
use tokio::sync::watch;

use super::store::{ClusterStore, StoreError};

/// The writes of one controller term, in Kubernetes.
pub struct KubeTerm {
    pub store: Arc<KubeMetadataStore>,
    pub elector: Arc<Elector>,
    pub epoch: i64,
    pub writer: i32,
}

fn classify(e: KubeError) -> StoreError {
    match e {
        KubeError::Conflict { .. } => StoreError::Conflict(e.to_string()),
        KubeError::Fenced { .. } => StoreError::Fenced(e.to_string()),
        KubeError::Invalid { .. } | KubeError::Api(_) => StoreError::Unavailable(e.to_string()),
    }
}

impl KubeTerm {
    /// Refuses to write once the Lease may have passed to someone else.
    fn still_leading(&self) -> Result<(), StoreError> {
        if self.elector.state().is_leading_at(Instant::now()) {
            Ok(())
        } else {
            Err(StoreError::Fenced(
                "the controller Lease is no longer held".into(),
            ))
        }
    }
}

#[tonic::async_trait]
impl ClusterStore for KubeTerm {
    async fn put_topic(
        &self,
        t: &TopicRecord,
        expected: Option<&str>,
    ) -> Result<String, StoreError> {
        self.still_leading()?;
        self.store
            .put_topic(self.epoch, self.writer, t, expected)
            .await
            .map_err(classify)
    }

    async fn delete_topic(&self, name: &str, expected: &str) -> Result<(), StoreError> {
        self.still_leading()?;
        self.store
            .delete_topic(name, expected)
            .await
            .map_err(classify)
    }

    async fn put_cluster(&self, c: &ClusterRecord, expected: &str) -> Result<String, StoreError> {
        self.still_leading()?;
        self.store
            .put_cluster(self.epoch, self.writer, c, Some(expected))
            .await
            .map_err(classify)
    }
}

/// Leadership as a `bool`: true from the moment the elector leads until
/// it may no longer (lost, or its deadline passed without a renewal).
pub fn leadership(elector: Arc<Elector>) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            elector.leading().await;
            tracing::info!("holding the controller Lease");
            tx.send_replace(true);
            elector.lost().await;
            tracing::warn!("the controller Lease is lost; stopping the controller");
            tx.send_replace(false);
        }
    });
    rx
}
