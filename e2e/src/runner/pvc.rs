//! PersistentVolumeClaims: a default StorageClass, and for every pending
//! claim a PersistentVolume pre-bound to it (hostPath = the claim's data
//! directory), which kube-controller-manager's binder then binds. Released
//! volumes of this runner are deleted (their data directory stays until the
//! control plane's state is removed).

use std::path::Path;

use anyhow::Result;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::volumes::pvc_dir;

pub const STORAGE_CLASS: &str = "moldau-local";
pub const PROVISIONER: &str = "moldau.io/podrunner";
const LABEL: &str = "moldau.io/podrunner-volume";

/// Creates the default StorageClass unless it exists.
pub async fn ensure_storage_class(client: &Client) -> Result<()> {
    let api: Api<StorageClass> = Api::all(client.clone());
    if api.get_opt(STORAGE_CLASS).await?.is_some() {
        return Ok(());
    }
    let sc: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
    }))?;
    match api.create(&PostParams::default(), &sc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One pass: provision volumes for pending claims, delete released volumes.
pub async fn sync(client: &Client, state: &Path) -> Result<()> {
    let pvcs: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for pvc in pvcs.list(&ListParams::default()).await?.items {
        let bound = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_ref())
            .is_some();
        let pending = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound");
        if bound || !pending || pvc.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (Some(ns), Some(name), Some(uid)) = (
            pvc.metadata.namespace.clone(),
            pvc.metadata.name.clone(),
            pvc.metadata.uid.clone(),
        ) else {
            continue;
        };
        let spec = pvc.spec.clone().unwrap_or_default();
        let pv_name = format!("moldau-pv-{uid}");
        if pvs.get_opt(&pv_name).await?.is_some() {
            continue;
        }
        let dir = pvc_dir(state, &ns, &name);
        std::fs::create_dir_all(&dir)?;
        let size = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "1Gi".into());
        let modes = spec
            .access_modes
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| vec!["ReadWriteOnce".into()]);
        let pv: PersistentVolume = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": pv_name,
                "labels": {LABEL: "true"},
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
            },
            "spec": {
                "capacity": {"storage": size},
                "accessModes": modes,
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": spec.storage_class_name.clone().unwrap_or_default(),
                "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
                "hostPath": {"path": dir.to_string_lossy(), "type": "DirectoryOrCreate"},
                "claimRef": {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": ns, "name": name, "uid": uid,
                },
            },
        }))?;
        match pvs.create(&PostParams::default(), &pv).await {
            Ok(_) => tracing::info!(%ns, claim = %name, "provisioned volume {pv_name}"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for pv in pvs
        .list(&ListParams::default().labels(&format!("{LABEL}=true")))
        .await?
        .items
    {
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Released") | Some("Failed")) {
            let name = pv.metadata.name.clone().unwrap_or_default();
            let _ = pvs.delete(&name, &DeleteParams::default()).await;
        }
    }
    Ok(())
}
