//! How reconcilers reach a cluster's brokers: the Ready broker pods as
//! (broker id = pod ordinal, pod IP and listener port), never a Service or
//! DNS name ([`ready_brokers`], [`pick_broker`], [`controller_address`]:
//! pure, over the pods' [`pod_state`]), and an admin connection to the
//! active controller among them ([`connect_controller`], [`connect_admin`]). Shared by the
//! KafkaCluster, KafkaTopic, quota, retention, rebalance and user
//! reconcilers, none of which owns it.
//!
//! A secured cluster (`cluster::listeners`) is reached on its `REPLICATION`
//! listener over TLS, with a client certificate for the operator that the
//! cluster CA signs, minted in memory for each connection ([`dial_for`]).

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::builders::Names;
use crate::cluster::listeners;
use crate::cluster::pods::pod_state;
use crate::context::Context;
use crate::crd::KafkaCluster;
use crate::kafka::{AdminClient, Dial, KafkaError, TlsDial};

/// The port the operator dials on every broker of `kc`: the inter-broker
/// listener's (`REPLICATION` on a secured cluster).
pub fn admin_port(kc: &KafkaCluster) -> i32 {
    listeners::layout(&kc.spec).inter_broker().port
}

/// How the operator dials `kc`'s brokers: plain TCP, or TLS with a fresh
/// operator certificate when the cluster is secured (its CA must exist:
/// the KafkaCluster reconciler creates it before any broker starts).
pub async fn dial_for(ctx: &Context, kc: &KafkaCluster) -> Result<Dial, KafkaError> {
    let timeout = ctx.tunables.kafka_timeout;
    if !listeners::layout(&kc.spec).secured() {
        return Ok(Dial::plain(timeout));
    }
    let names = Names::of(kc).map_err(|e| KafkaError::Tls(e.to_string()))?;
    let identity = crate::certs::operator_identity(&ctx.client, kc, std::time::SystemTime::now())
        .await
        .map_err(|e| KafkaError::Tls(e.to_string()))?;
    let server_name = format!("{}.{}.svc", names.bootstrap_service(), names.namespace);
    let tls = TlsDial::new(
        &identity.cluster_ca_cert,
        &identity.client.cert,
        &identity.client.key,
        &server_name,
    )?;
    Ok(Dial {
        timeout,
        tls: Some(tls),
    })
}

/// The Ready broker pods of a cluster as (broker id = pod ordinal, pod IP and
/// listener port), lowest ordinal first.
pub fn ready_brokers(pods: &[Pod], port: i32) -> Vec<(i32, SocketAddr)> {
    let Ok(port) = u16::try_from(port) else {
        return Vec::new();
    };
    let mut out: Vec<(i32, SocketAddr)> = pods
        .iter()
        .filter_map(|p| {
            let state = pod_state(p)?;
            if !state.ready || state.terminating {
                return None;
            }
            let ip: IpAddr = p.status.as_ref()?.pod_ip.as_ref()?.parse().ok()?;
            Some((state.ordinal, SocketAddr::new(ip, port)))
        })
        .collect();
    out.sort_by_key(|(ordinal, _)| *ordinal);
    out
}

/// The address of the Ready broker with the lowest ordinal.
pub fn pick_broker(pods: &[Pod], port: i32) -> Option<SocketAddr> {
    ready_brokers(pods, port).first().map(|(_, addr)| *addr)
}

/// The pod address of the active controller (broker id = pod ordinal), if it
/// is one of the Ready brokers.
pub fn controller_address(ready: &[(i32, SocketAddr)], controller_id: i32) -> Option<SocketAddr> {
    ready
        .iter()
        .find(|(id, _)| *id == controller_id)
        .map(|(_, addr)| *addr)
}

/// An admin connection to the controller among `brokers`: asks the first
/// broker that answers (lowest ordinal first) who the controller is, and
/// reconnects there when it is another one of them.
pub async fn connect_controller(
    brokers: &[(i32, SocketAddr)],
    dial: &Dial,
) -> Result<(AdminClient, SocketAddr), KafkaError> {
    let mut last = KafkaError::Protocol("no broker to connect to".into());
    for &(_, addr) in brokers {
        match AdminClient::dial(addr, dial).await {
            Ok(mut admin) => {
                let md = admin.metadata(Some(&[])).await?;
                return match controller_address(brokers, md.controller_id) {
                    Some(c) if c != addr => Ok((AdminClient::dial(c, dial).await?, c)),
                    _ => Ok((admin, addr)),
                };
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// [`connect_controller`] as [`dial_for`] says for `kc`.
pub async fn connect_admin(
    ctx: &Context,
    kc: &KafkaCluster,
    brokers: &[(i32, SocketAddr)],
) -> Result<(AdminClient, SocketAddr), KafkaError> {
    connect_controller(brokers, &dial_for(ctx, kc).await?).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use std::collections::BTreeMap;

    fn pod(ordinal: i32, ip: Option<&str>, ready: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(format!("demo-{ordinal}"));
        p.metadata.labels = Some(BTreeMap::from([(
            "apps.kubernetes.io/pod-index".to_string(),
            ordinal.to_string(),
        )]));
        p.status = Some(PodStatus {
            pod_ip: ip.map(String::from),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    #[test]
    fn picks_lowest_ready_pod_ip() {
        let pods = [
            pod(2, Some("127.0.0.3"), true),
            pod(0, Some("127.0.0.1"), false),
            pod(1, Some("127.0.0.2"), true),
        ];
        assert_eq!(
            pick_broker(&pods, 9092),
            Some("127.0.0.2:9092".parse().unwrap())
        );
    }

    #[test]
    fn controller_is_found_among_ready_brokers() {
        let pods = [
            pod(2, Some("127.0.0.3"), true),
            pod(0, Some("127.0.0.1"), true),
            pod(1, Some("127.0.0.2"), false),
        ];
        let ready = ready_brokers(&pods, 9092);
        assert_eq!(
            ready.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            vec![0, 2]
        );
        assert_eq!(
            controller_address(&ready, 2),
            Some("127.0.0.3:9092".parse().unwrap())
        );
        assert_eq!(controller_address(&ready, 1), None, "not ready");
        assert_eq!(controller_address(&ready, -1), None, "unknown controller");
    }

    #[test]
    fn no_ip_or_no_ready_pod_means_none() {
        assert_eq!(pick_broker(&[pod(0, None, true)], 9092), None);
        assert_eq!(pick_broker(&[pod(0, Some("127.0.0.1"), false)], 9092), None);
        assert_eq!(pick_broker(&[pod(0, Some("not-an-ip"), true)], 9092), None);
        assert_eq!(pick_broker(&[pod(0, Some("127.0.0.1"), true)], 70000), None);
    }
}
