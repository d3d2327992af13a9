//! Pods through the pod runner: a StatefulSet of 3 `moldau-testpod`
//! processes with PVCs becomes Running/Ready and answers on its pod IPs; a
//! deleted pod comes back with the same data; scaling down stops processes.
//! Also: unknown images, and in-cluster credentials handed to a pod.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use moldau_e2e::{
    ensure_pod_runner, http, paths, pod_is_ready, process_alive, wait_for, TestNamespace, NODE_NAME,
};
use serde_json::{json, Value};

fn runner() -> Result<u32> {
    ensure_pod_runner(
        Path::new(env!("CARGO_BIN_EXE_moldau-podrunner")),
        &[(
            "moldau/testpod",
            Path::new(env!("CARGO_BIN_EXE_moldau-testpod")),
        )],
    )
}

fn statefulset(replicas: i32) -> Result<StatefulSet> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "testpod"},
        "spec": {
            "replicas": replicas,
            "serviceName": "testpod",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "testpod"}},
            "template": {
                "metadata": {"labels": {"app": "testpod"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "testpod",
                        "image": "moldau/testpod:latest",
                        "args": ["--listen", "$(POD_IP):8080", "--data", "/var/lib/testpod/data"],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "POD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}},
                        ],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
                        "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 2},
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/testpod"}],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    }))?)
}

fn pod_addr(pod: &Pod) -> Result<SocketAddr> {
    let ip: Ipv4Addr = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .ok_or_else(|| anyhow!("pod has no IP"))?
        .parse()?;
    anyhow::ensure!(ip.octets()[0] == 127, "pod IP {ip} outside 127.0.0.0/8");
    Ok(SocketAddr::from((ip, 8080)))
}

async fn info(pod: &Pod) -> Result<Value> {
    let (code, body) = http("GET", pod_addr(pod)?, "/", b"").await?;
    anyhow::ensure!(code == 200, "GET / -> {code}");
    Ok(serde_json::from_slice(&body)?)
}

async fn ready_pods(api: &Api<Pod>, n: usize) -> Result<Vec<Pod>> {
    wait_for(Duration::from_secs(120), &format!("{n} ready pods"), || {
        let api = api.clone();
        async move {
            let pods = api
                .list(&ListParams::default().labels("app=testpod"))
                .await?
                .items;
            let live: Vec<Pod> = pods
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            Ok((live.len() == n && live.iter().all(pod_is_ready)).then_some(live))
        }
    })
    .await
}

#[tokio::test]
async fn statefulset_pods_run_keep_data_and_scale_down() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    runner()?;
    let ns = TestNamespace::new("sts").await?;
    let sts_api: Api<StatefulSet> = ns.api();
    let pods: Api<Pod> = ns.api();
    sts_api
        .create(&PostParams::default(), &statefulset(3)?)
        .await?;

    let mut live = ready_pods(&pods, 3).await?;
    live.sort_by_key(|p| p.metadata.name.clone());
    let mut ips = HashSet::new();
    let mut pids = Vec::new();
    for (i, p) in live.iter().enumerate() {
        let name = p.metadata.name.clone().unwrap_or_default();
        assert_eq!(name, format!("testpod-{i}"));
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(NODE_NAME)
        );
        assert!(ips.insert(pod_addr(p)?.ip()), "duplicate pod IP");
        let v = info(p)
            .await
            .with_context(|| format!("talking to {name}"))?;
        assert_eq!(v["pod"], json!(name));
        assert_eq!(v["namespace"], json!(ns.name));
        assert_eq!(v["index"], json!(i.to_string()));
        assert_eq!(v["boots"], json!(1));
        let dir = ns.pvc_dir(&format!("data-testpod-{i}"));
        assert_eq!(
            v["data_dir"],
            json!(dir.join("data")),
            "mount path not rewritten"
        );
        let pid = v["pid"].as_u64().unwrap() as u32;
        assert!(process_alive(pid));
        let cid = p
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0]
            .container_id
            .clone()
            .unwrap_or_default();
        assert_eq!(cid, format!("moldau://{pid}"));
        pids.push(pid);
    }
    // PVCs are Bound.
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    wait_for(Duration::from_secs(30), "PVCs bound", || {
        let pvcs = pvcs.clone();
        async move {
            let l = pvcs.list(&ListParams::default()).await?.items;
            Ok((l.len() == 3
                && l.iter()
                    .all(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")))
            .then_some(()))
        }
    })
    .await?;

    // Write through the process, delete the pod, find the data again.
    let marker = uuid::Uuid::new_v4().to_string();
    let (code, _) = http(
        "PUT",
        pod_addr(&live[1])?,
        "/file/marker",
        marker.as_bytes(),
    )
    .await?;
    assert_eq!(code, 200);
    let on_host = ns.pvc_dir("data-testpod-1").join("data/marker");
    assert_eq!(std::fs::read_to_string(&on_host)?, marker);
    let old_uid = live[1].metadata.uid.clone();
    pods.delete("testpod-1", &DeleteParams::default()).await?;
    wait_for(
        Duration::from_secs(30),
        "old testpod-1 process gone",
        || {
            let pid = pids[1];
            async move { Ok((!process_alive(pid)).then_some(())) }
        },
    )
    .await?;
    let again = wait_for(
        Duration::from_secs(90),
        "testpod-1 recreated and ready",
        || {
            let pods = pods.clone();
            let old_uid = old_uid.clone();
            async move {
                let p = pods.get_opt("testpod-1").await?;
                Ok(p.filter(|p| p.metadata.uid != old_uid && pod_is_ready(p)))
            }
        },
    )
    .await?;
    let v = info(&again).await?;
    assert_eq!(v["boots"], json!(2), "data directory not kept: {v}");
    let (code, body) = http("GET", pod_addr(&again)?, "/file/marker", b"").await?;
    assert_eq!(code, 200);
    assert_eq!(String::from_utf8_lossy(&body), marker);
    let new_pid1 = v["pid"].as_u64().unwrap() as u32;

    // Scale to 1: the processes of testpod-1 and testpod-2 stop.
    sts_api
        .patch(
            "testpod",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await?;
    wait_for(Duration::from_secs(60), "scale down to 1", || {
        let pods = pods.clone();
        let gone = [new_pid1, pids[2]];
        async move {
            let l = pods
                .list(&ListParams::default().labels("app=testpod"))
                .await?
                .items;
            Ok((l.len() == 1 && gone.iter().all(|p| !process_alive(*p))).then_some(()))
        }
    })
    .await?;
    assert!(process_alive(pids[0]), "testpod-0 must keep running");
    let left = ready_pods(&pods, 1).await?;
    assert_eq!(left[0].metadata.name.as_deref(), Some("testpod-0"));
    Ok(())
}

#[tokio::test]
async fn unknown_image_is_reported() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    runner()?;
    let ns = TestNamespace::new("img").await?;
    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mystery"},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/mystery:1"}]},
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let reason = wait_for(Duration::from_secs(60), "ImageNotMapped", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("mystery").await?;
            let st = p.status.unwrap_or_default();
            let cond = st
                .conditions
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Ready" && c.reason.as_deref() == Some("ImageNotMapped"));
            Ok(cond.map(|c| (st.phase, c.message)))
        }
    })
    .await?;
    assert_eq!(reason.0.as_deref(), Some("Pending"));
    assert!(reason.1.unwrap_or_default().contains("--image"));
    // Deleting it completes (the runner removes the object).
    pods.delete("mystery", &DeleteParams::default()).await?;
    wait_for(Duration::from_secs(30), "pod removed", || {
        let pods = pods.clone();
        async move { Ok(pods.get_opt("mystery").await?.is_none().then_some(())) }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn pod_gets_service_account_kubeconfig() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    runner()?;
    let ns = TestNamespace::new("sa").await?;
    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "incluster"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "c", "image": "moldau/testpod",
                "args": ["--listen", "$(POD_IP):8080", "--data", "/scratch"],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "readinessProbe": {"exec": {"command": ["test", "-f", "/scratch/boots"]}, "periodSeconds": 1},
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let p = wait_for(Duration::from_secs(60), "incluster pod ready", || {
        let pods = pods.clone();
        async move { Ok(pods.get_opt("incluster").await?.filter(pod_is_ready)) }
    })
    .await?;
    let v = info(&p).await?;
    let kc = v["kubeconfig"].as_str().unwrap_or_default().to_string();
    assert!(!kc.is_empty(), "no KUBECONFIG in the pod's env: {v}");
    // The pod's credentials are its ServiceAccount's: authenticated, and
    // (without RBAC grants) forbidden to list pods.
    let cfg = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kc)?,
        &Default::default(),
    )
    .await?;
    let sa_client = kube::Client::try_from(cfg)?;
    let err = Api::<Pod>::namespaced(sa_client, &ns.name)
        .list(&ListParams::default())
        .await
        .expect_err("default ServiceAccount must not list pods");
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message
                    .contains(&format!("system:serviceaccount:{}:default", ns.name)),
                "{s:?}"
            );
        }
        e => panic!("unexpected error {e}"),
    }
    Ok(())
}
