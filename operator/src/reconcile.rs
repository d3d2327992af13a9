//! The edge every finalized reconciler shares: the resource's namespaced
//! API, Kubernetes' finalizer protocol around the reconciler's own Apply
//! and Cleanup, the reconcile counted and timed in `/metrics`, and the
//! requeue after a failure (retry soon, never crash). The reconcilers
//! (`topic`, `quota`, `retention`, `user`) keep only what is theirs.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::context::Context;
use crate::error::{Error, Result};

/// The namespaced API of `obj`'s kind in `obj`'s namespace.
pub fn namespaced_api<K>(ctx: &Context, obj: &K) -> Result<Api<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope> + ResourceExt,
    K::DynamicType: Default,
{
    let ns = obj
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    Ok(Api::namespaced(ctx.client.clone(), &ns))
}

/// Runs `handle` for `obj` inside finalizer `finalizer_name` (Apply while
/// the object lives, Cleanup once it is being deleted; the finalizer is
/// removed only when Cleanup succeeds).
pub async fn finalized<K, F, Fut>(
    api: &Api<K>,
    finalizer_name: &str,
    obj: Arc<K>,
    handle: F,
) -> Result<Action>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    K::DynamicType: Default,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = Result<Action>>,
{
    finalizer(api, finalizer_name, obj, handle)
        .await
        .map_err(|e| Error::Finalizer(e.to_string()))
}

/// `reconcile`, counted and timed under `kind` (and counted as failed
/// when it fails).
pub async fn metered(
    ctx: &Context,
    kind: &str,
    reconcile: impl Future<Output = Result<Action>>,
) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile.await;
    ctx.metrics.reconciled(kind, started.elapsed());
    if result.is_err() {
        ctx.metrics.failed(kind);
    }
    result
}

/// The requeue after a failed reconcile of `obj` (a `kind`): logged, and
/// retried after the operator's retry interval.
pub fn requeue_after_error<K: ResourceExt>(
    kind: &str,
    obj: &K,
    err: &Error,
    ctx: &Context,
) -> Action {
    tracing::warn!(kind, name = %obj.name_any(), namespace = ?obj.namespace(), error = %err, "reconcile failed");
    Action::requeue(ctx.tunables.retry)
}
