//! The built helm binary works: version, template, and an install into the
//! e2e control plane.

use k8s_openapi::api::core::v1::ConfigMap;
use moldau_e2e::{helm, paths, TestNamespace};

fn ok(out: std::process::Output) -> anyhow::Result<String> {
    anyhow::ensure!(
        out.status.success(),
        "helm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn helm_version_and_template() -> anyhow::Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    let v = ok(helm(&["version", "--short"])?)?;
    assert!(v.starts_with("v3."), "unexpected helm version {v}");
    let chart = paths::fixture("chart");
    let chart = chart.to_str().unwrap();
    ok(helm(&["lint", chart])?)?;
    let out = ok(helm(&["template", "rel", chart, "--set", "replicas=5"])?)?;
    assert!(out.contains("name: rel-moldau-e2e"), "{out}");
    assert!(out.contains("replicas: \"5\""), "{out}");
    assert!(out.contains("greeting: \"hello\""), "{out}");
    Ok(())
}

#[tokio::test]
async fn helm_install_into_control_plane() -> anyhow::Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    let ns = TestNamespace::new("helm").await?;
    let chart = paths::fixture("chart");
    let out = ok(helm(&[
        "install",
        "rel",
        chart.to_str().unwrap(),
        "-n",
        &ns.name,
        "--set",
        "greeting=hi",
        "--wait",
        "--timeout",
        "60s",
    ])?)?;
    assert!(out.contains("STATUS: deployed"), "{out}");
    let cm = ns.api::<ConfigMap>().get("rel-moldau-e2e").await?;
    let data = cm.data.unwrap_or_default();
    assert_eq!(data.get("greeting").map(String::as_str), Some("hi"));
    assert!(
        data.get("kubeVersion")
            .is_some_and(|v| v.starts_with("v1.34")),
        "{data:?}"
    );
    ok(helm(&["uninstall", "rel", "-n", &ns.name, "--wait"])?)?;
    assert!(ns
        .api::<ConfigMap>()
        .get_opt("rel-moldau-e2e")
        .await?
        .is_none());
    Ok(())
}
