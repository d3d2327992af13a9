//! Pod runner details beyond the StatefulSet: env from ConfigMaps/Secrets,
//! ConfigMap volumes, mount-path rewriting inside scripts, restart policies,
//! liveness-probe restarts and `kubectl logs`.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::PostParams;
use kube::Api;
use moldau_e2e::{
    ensure_pod_runner, paths, pod_is_ready, runner_state_dir, wait_for, TestNamespace,
};
use serde_json::json;

fn runner() -> Result<u32> {
    ensure_pod_runner(
        Path::new(env!("CARGO_BIN_EXE_moldau-podrunner")),
        &[(
            "moldau/testpod",
            Path::new(env!("CARGO_BIN_EXE_moldau-testpod")),
        )],
    )
}

async fn create(pods: &Api<Pod>, v: serde_json::Value) -> Result<Pod> {
    Ok(pods
        .create(&PostParams::default(), &serde_json::from_value(v)?)
        .await?)
}

fn restart_count(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map(|c| c.restart_count)
        .unwrap_or(0)
}

#[tokio::test]
async fn env_sources_and_config_volumes() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    runner()?;
    let ns = TestNamespace::new("env").await?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "cfg"},
        "data": {"greeting": "hello", "mode": "fast"},
    }))?;
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "sec"},
        "stringData": {"password": "s3cret"},
    }))?;
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await?;
    let pods: Api<Pod> = ns.api();
    let script =
        "echo \"$GREETING $PASSWORD $mode $SELF $(cat /etc/cfg/greeting)\" > /scratch/out.tmp \
                  && mv /scratch/out.tmp /scratch/out && exec sleep 600";
    let pod = create(
        &pods,
        json!({
            "metadata": {"name": "envs", "labels": {"tier": "gold"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "c", "image": "moldau/testpod",
                    "command": ["sh", "-c", script],
                    "env": [
                        {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                        {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
                        {"name": "SELF", "value": "$(TIER)@$(HOSTNAME)"},
                    ],
                    "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": ""}],
                    "volumeMounts": [
                        {"name": "scratch", "mountPath": "/scratch"},
                        {"name": "cfg", "mountPath": "/etc/cfg"},
                    ],
                }],
                "volumes": [
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                ],
            },
        }),
    )
    .await?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let pod_dir = runner_state_dir().join(format!("pods/{}_envs_{uid}", ns.name));
    let out = pod_dir.join("volumes/scratch/out");
    let text = wait_for(Duration::from_secs(60), "the pod's output file", || {
        let out = out.clone();
        async move { Ok(std::fs::read_to_string(&out).ok()) }
    })
    .await?;
    // `mode` comes from envFrom; SELF is expanded from TIER (a label) and HOSTNAME.
    assert_eq!(text.trim(), "hello s3cret fast gold@envs hello");
    assert_eq!(
        std::fs::read_to_string(pod_dir.join("volumes/cfg/mode"))?,
        "fast"
    );
    wait_for(Duration::from_secs(30), "pod ready", || {
        let pods = pods.clone();
        async move { Ok(pods.get_opt("envs").await?.filter(pod_is_ready)) }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn restart_policies_and_liveness() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    runner()?;
    let ns = TestNamespace::new("restart").await?;
    let pods: Api<Pod> = ns.api();
    let sh = |name: &str, policy: &str, script: &str| {
        json!({
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": policy,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "moldau/testpod", "command": ["sh", "-c", script]}],
            },
        })
    };
    create(
        &pods,
        sh("done", "Never", "echo first; echo done-output; exit 0"),
    )
    .await?;
    create(&pods, sh("failed", "Never", "exit 3")).await?;
    create(&pods, sh("crashloop", "Always", "exit 1")).await?;
    create(&pods, sh("onfailure", "OnFailure", "exit 0")).await?;
    // Liveness fails until /scratch/alive exists: the container is restarted.
    create(
        &pods,
        json!({
            "metadata": {"name": "liveness"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "c", "image": "moldau/testpod",
                    "args": ["--listen", "$(POD_IP):8080", "--data", "/scratch"],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "livenessProbe": {
                        "httpGet": {"path": "/file/alive", "port": 8080},
                        "periodSeconds": 1, "failureThreshold": 2,
                    },
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }],
                "volumes": [{"name": "scratch", "emptyDir": {}}],
            },
        }),
    )
    .await?;
    let phase = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    for (name, want) in [
        ("done", "Succeeded"),
        ("failed", "Failed"),
        ("onfailure", "Succeeded"),
    ] {
        wait_for(Duration::from_secs(60), &format!("{name} {want}"), || {
            let pods = pods.clone();
            async move { Ok(pods.get_opt(name).await?.filter(|p| phase(p) == want)) }
        })
        .await?;
    }
    // kubectl logs goes API server -> the runner's kubelet endpoint on 127.0.0.1.
    let logs = ns.kubectl_ok(&["logs", "done"])?;
    assert_eq!(logs, "first\ndone-output\n");
    let logs = ns.kubectl_ok(&["logs", "done", "--tail=1"])?;
    assert_eq!(logs, "done-output\n");
    let failed = pods.get("failed").await?;
    let term = failed.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 3);
    wait_for(Duration::from_secs(60), "crashloop restarted twice", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("crashloop").await?;
            Ok((restart_count(&p) >= 2 && phase(&p) == "Running").then_some(()))
        }
    })
    .await?;
    let live = wait_for(Duration::from_secs(60), "liveness restart", || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get_opt("liveness")
                .await?
                .filter(|p| restart_count(p) >= 1))
        }
    })
    .await?;
    let last = live.status.unwrap().container_statuses.unwrap()[0]
        .last_state
        .clone()
        .and_then(|s| s.terminated);
    assert!(
        last.is_some(),
        "no lastState.terminated after a liveness restart"
    );
    Ok(())
}
