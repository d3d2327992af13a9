//! Two contenders for one coordination.k8s.io Lease: at most one leads at
//! any time, and when the holder stops renewing the other takes over within
//! the lease duration (plus one retry period).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use moldau_e2e::leader::{Elector, LeaseConfig};
use moldau_e2e::{paths, TestNamespace};

#[tokio::test]
async fn lease_leader_election_and_takeover() -> anyhow::Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    let ns = TestNamespace::new("lease").await?;
    let lease_duration = Duration::from_secs(4);
    let retry = Duration::from_millis(500);
    let cfg = |id: &str| LeaseConfig {
        namespace: ns.name.clone(),
        name: "moldau-controller".into(),
        identity: id.into(),
        lease_duration,
        retry_period: retry,
    };
    let a = Elector::start(ns.client.clone(), cfg("contender-a"));
    let b = Elector::start(ns.client.clone(), cfg("contender-b"));

    // Phase 1: someone leads within a few seconds; never both.
    let t0 = Instant::now();
    let mut leader_seen_at = None;
    while t0.elapsed() < Duration::from_secs(6) {
        let (la, lb) = (a.is_leader(), b.is_leader());
        assert!(!(la && lb), "both contenders lead at once");
        if (la || lb) && leader_seen_at.is_none() {
            leader_seen_at = Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(leader_seen_at.is_some(), "nobody acquired the lease");
    let (holder, other) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    assert!(
        holder.is_leader() && !other.is_leader(),
        "leadership flapped"
    );
    let lease = ns.api::<Lease>().get("moldau-controller").await?;
    let spec = lease.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some(holder.identity()));
    let transitions_before = spec.lease_transitions.unwrap_or(0);

    // Phase 2: the holder stops renewing; the other takes over in time and
    // never while the old holder still believes it leads.
    holder.stop();
    let stopped = Instant::now();
    let took_over = loop {
        let (lh, lo) = (holder.is_leader(), other.is_leader());
        assert!(!(lh && lo), "both contenders lead at once during takeover");
        if lo {
            break stopped.elapsed();
        }
        assert!(
            stopped.elapsed() < lease_duration + retry * 3,
            "no takeover after {:?}",
            stopped.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("takeover after {took_over:?} (lease duration {lease_duration:?})");
    assert!(
        took_over <= lease_duration + retry * 2,
        "takeover took {took_over:?}, more than the lease duration plus two retry periods"
    );
    assert!(!holder.is_leader());
    let lease = ns.api::<Lease>().get("moldau-controller").await?;
    let spec = lease.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some(other.identity()));
    assert_eq!(spec.lease_transitions.unwrap_or(0), transitions_before + 1);
    Ok(())
}
