//! What a `KafkaCluster`'s `listeners` and `authorization` become on its
//! brokers (issue 38), as pure functions of the spec: the broker's named
//! listeners with their security protocols, the `listener.name.<name>.*`
//! configs that point at the certificates the operator mounts, the
//! authorizer and its super users, and the port the operator itself dials.
//!
//! Decisions:
//! - Without `spec.listeners` nothing changes from older versions: one
//!   PLAINTEXT listener on `spec.listenerPort`, also between brokers.
//! - A cluster is *secured* when a listener has TLS or authentication, or
//!   `authorization` is set. Its brokers then also serve `REPLICATION` on
//!   [`REPLICATION_PORT`]: TLS with a client certificate required, both
//!   signed by the cluster CA. Brokers replicate, send transaction markers
//!   and reach the controller's gRPC over it, and the operator's admin
//!   connection uses it; no client listener carries broker traffic, so no
//!   application credential or ACL can cut replication. (Strimzi's model;
//!   Strimzi's replication port 9091 is Moldau's controller port.)
//! - `REPLICATION` always advertises the pod's DNS name, the name the
//!   broker certificate carries, whatever `advertisedAddress` says for the
//!   client listeners.
//! - With authorization the brokers' and the operator's principals are
//!   super users (Kafka requires it of the inter-broker principal), before
//!   any the spec lists.

use std::collections::BTreeMap;

use crate::certs;
use crate::crd::{
    AdvertisedAddress, ClusterAuthorizationType, KafkaClusterSpec, ListenerAuthenticationType,
};

/// The brokers' own listener in a secured cluster.
pub const REPLICATION_LISTENER: &str = "REPLICATION";
/// Its port.
pub const REPLICATION_PORT: i32 = 9090;
/// Where the broker certificate Secret is mounted.
pub const TLS_DIR: &str = "/etc/moldau-tls";
use certs::{
    CA_CERT_KEY as CLUSTER_CA_KEY, CLIENTS_CA_CERT_KEY as CLIENTS_CA_KEY,
    KEYSTORE_KEY as BROKER_PEM_KEY,
};
/// Kafka's authorizer class, which Moldau's broker serves.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
/// Name of the single listener of a cluster without `spec.listeners`.
const DEFAULT_LISTENER: &str = "PLAINTEXT";

/// One listener of every broker of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// The broker's name for it (upper case).
    pub name: String,
    /// The spec's name for it (ports and Services are named after it).
    pub port_name: String,
    /// Port it binds.
    pub port: i32,
    /// TLS.
    pub tls: bool,
    /// Client authentication.
    pub authentication: Option<ListenerAuthenticationType>,
}

impl Listener {
    /// Kafka's security protocol of the listener.
    pub fn protocol(&self) -> &'static str {
        let sasl = self.authentication == Some(ListenerAuthenticationType::ScramSha512);
        match (self.tls, sasl) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }
}

/// The listeners of a cluster and how they are secured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Client listeners, in spec order.
    pub clients: Vec<Listener>,
    /// `REPLICATION`, when the cluster is secured.
    pub replication: Option<Listener>,
    /// Extra super users of an authorized cluster; `None`: no authorizer.
    pub super_users: Option<Vec<String>>,
    /// Whether `spec.listeners` was given at all.
    explicit: bool,
}

/// The listeners `spec` asks for.
pub fn layout(spec: &KafkaClusterSpec) -> Layout {
    let clients: Vec<Listener> = if spec.listeners.is_empty() {
        vec![Listener {
            name: DEFAULT_LISTENER.into(),
            port_name: "kafka".into(),
            port: spec.listener_port,
            tls: false,
            authentication: None,
        }]
    } else {
        spec.listeners
            .iter()
            .map(|l| Listener {
                name: l.name.to_ascii_uppercase(),
                port_name: l.name.clone(),
                port: l.port,
                tls: l.tls,
                authentication: l.authentication.as_ref().map(|a| a.type_),
            })
            .collect()
    };
    let super_users = spec.authorization.as_ref().map(|a| match a.type_ {
        ClusterAuthorizationType::Simple => a.super_users.clone(),
    });
    let secured =
        super_users.is_some() || clients.iter().any(|l| l.tls || l.authentication.is_some());
    Layout {
        clients,
        replication: secured.then(|| Listener {
            name: REPLICATION_LISTENER.into(),
            port_name: "replication".into(),
            port: REPLICATION_PORT,
            tls: true,
            authentication: Some(ListenerAuthenticationType::Tls),
        }),
        super_users,
        explicit: !spec.listeners.is_empty(),
    }
}

/// What the client listeners advertise: the spec's choice, else the pods'
/// DNS names when a listener has TLS (a certificate names them, not IPs),
/// else the pod IP.
pub fn advertised_address(spec: &KafkaClusterSpec) -> AdvertisedAddress {
    spec.advertised_address.unwrap_or({
        if spec.listeners.iter().any(|l| l.tls) {
            AdvertisedAddress::PodDns
        } else {
            AdvertisedAddress::PodIp
        }
    })
}

impl Layout {
    /// Whether the cluster has TLS, authentication or authorization (and so
    /// `REPLICATION` and the operator-run CAs).
    pub fn secured(&self) -> bool {
        self.replication.is_some()
    }

    /// Every listener, `REPLICATION` last.
    pub fn all(&self) -> impl Iterator<Item = &Listener> {
        self.clients.iter().chain(self.replication.iter())
    }

    /// The listener brokers and the operator dial.
    pub fn inter_broker(&self) -> &Listener {
        self.replication.as_ref().unwrap_or(&self.clients[0])
    }

    /// Whether the brokers need `--set listeners=…` (several listeners or
    /// named ones) rather than the single-listener command line.
    pub fn needs_listener_configs(&self) -> bool {
        self.explicit || self.secured()
    }

    /// Kafka's `listeners`, each bound to the pod IP (`$(POD_IP)`, which
    /// the container's environment expands).
    pub fn listeners_config(&self) -> String {
        self.all()
            .map(|l| format!("{}://$(POD_IP):{}", l.name, l.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kafka's `advertised.listeners`: client listeners at `client_host`,
    /// `REPLICATION` at `dns_host` (both in `$(VAR)` form).
    pub fn advertised_config(&self, client_host: &str, dns_host: &str) -> String {
        self.clients
            .iter()
            .map(|l| format!("{}://{client_host}:{}", l.name, l.port))
            .chain(
                self.replication
                    .iter()
                    .map(|l| format!("{}://{dns_host}:{}", l.name, l.port)),
            )
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The broker configs of the listeners' security and of the
    /// authorizer, for the brokers of `cluster` (merged over `spec.config`,
    /// whose keys for these are refused).
    pub fn broker_properties(&self, cluster: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if !self.needs_listener_configs() {
            return out;
        }
        let map = self
            .all()
            .map(|l| format!("{}:{}", l.name, l.protocol()))
            .collect::<Vec<_>>()
            .join(",");
        out.insert("listener.security.protocol.map".into(), map);
        out.insert(
            "inter.broker.listener.name".into(),
            self.inter_broker().name.clone(),
        );
        for l in self.all() {
            let prefix = format!("listener.name.{}.", l.name.to_ascii_lowercase());
            let mut set = |key: &str, value: String| {
                out.insert(format!("{prefix}{key}"), value);
            };
            if l.tls {
                set("ssl.keystore.type", "PEM".into());
                set(
                    "ssl.keystore.location",
                    format!("{TLS_DIR}/{BROKER_PEM_KEY}"),
                );
            }
            match l.authentication {
                Some(ListenerAuthenticationType::Tls) => {
                    // the brokers' own listener trusts the cluster CA only;
                    // client listeners the clients CA only, so no user
                    // certificate passes as a broker and no broker's as a user
                    let ca = if l.name == REPLICATION_LISTENER {
                        CLUSTER_CA_KEY
                    } else {
                        CLIENTS_CA_KEY
                    };
                    set("ssl.truststore.type", "PEM".into());
                    set("ssl.truststore.location", format!("{TLS_DIR}/{ca}"));
                    set("ssl.client.auth", "required".into());
                }
                Some(ListenerAuthenticationType::ScramSha512) => {
                    set("sasl.enabled.mechanisms", "SCRAM-SHA-512".into());
                }
                None => {}
            }
        }
        if let Some(extra) = &self.super_users {
            out.insert("authorizer.class.name".into(), STANDARD_AUTHORIZER.into());
            let users: Vec<String> = [
                certs::broker_principal(cluster),
                certs::operator_principal(cluster),
            ]
            .into_iter()
            .chain(extra.iter().cloned())
            .collect();
            out.insert("super.users".into(), users.join(";"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: serde_json::Value) -> KafkaClusterSpec {
        let mut v = serde_json::json!({"replicas": 3, "image": "i", "storage": {"size": "1Gi"}});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn without_listeners_the_cluster_is_what_it_was() {
        let s = spec(serde_json::json!({}));
        let l = layout(&s);
        assert!(!l.secured());
        assert!(!l.needs_listener_configs());
        assert_eq!(l.inter_broker().port, 9092);
        assert!(l.broker_properties("demo").is_empty());
        assert_eq!(advertised_address(&s), AdvertisedAddress::PodIp);
    }

    #[test]
    fn plaintext_listeners_name_the_first_as_inter_broker() {
        let s = spec(serde_json::json!({"listeners": [
            {"name": "plain", "port": 9092}, {"name": "other", "port": 9094}
        ]}));
        let l = layout(&s);
        assert!(!l.secured());
        assert_eq!(
            l.listeners_config(),
            "PLAIN://$(POD_IP):9092,OTHER://$(POD_IP):9094"
        );
        let p = l.broker_properties("demo");
        assert_eq!(
            p["listener.security.protocol.map"],
            "PLAIN:PLAINTEXT,OTHER:PLAINTEXT"
        );
        assert_eq!(p["inter.broker.listener.name"], "PLAIN");
        assert!(!p.contains_key("authorizer.class.name"));
    }

    #[test]
    fn a_tls_scram_cluster_replicates_over_mutual_tls() {
        let s = spec(serde_json::json!({
            "listeners": [
                {"name": "plain", "port": 9092},
                {"name": "tls", "port": 9093, "tls": true, "authentication": {"type": "scram-sha-512"}},
                {"name": "mtls", "port": 9094, "tls": true, "authentication": {"type": "tls"}}
            ],
            "authorization": {"type": "simple", "superUsers": ["User:admin"]}
        }));
        let l = layout(&s);
        assert!(l.secured());
        assert_eq!(advertised_address(&s), AdvertisedAddress::PodDns);
        assert_eq!(l.inter_broker().name, "REPLICATION");
        assert_eq!(l.inter_broker().port, REPLICATION_PORT);
        assert_eq!(
            l.advertised_config("$(POD_IP)", "$(POD_NAME).x"),
            "PLAIN://$(POD_IP):9092,TLS://$(POD_IP):9093,MTLS://$(POD_IP):9094,REPLICATION://$(POD_NAME).x:9090"
        );
        let p = l.broker_properties("demo");
        assert_eq!(
            p["listener.security.protocol.map"],
            "PLAIN:PLAINTEXT,TLS:SASL_SSL,MTLS:SSL,REPLICATION:SSL"
        );
        assert_eq!(p["inter.broker.listener.name"], "REPLICATION");
        assert_eq!(
            p["listener.name.tls.sasl.enabled.mechanisms"],
            "SCRAM-SHA-512"
        );
        assert_eq!(
            p["listener.name.mtls.ssl.truststore.location"],
            "/etc/moldau-tls/clients-ca.crt"
        );
        assert_eq!(
            p["listener.name.replication.ssl.truststore.location"],
            "/etc/moldau-tls/ca.crt"
        );
        assert_eq!(p["listener.name.replication.ssl.client.auth"], "required");
        assert!(!p.contains_key("listener.name.plain.ssl.keystore.location"));
        assert_eq!(p["authorizer.class.name"], STANDARD_AUTHORIZER);
        let users: Vec<&str> = p["super.users"].split(';').collect();
        assert_eq!(
            users,
            [
                certs::broker_principal("demo").as_str(),
                certs::operator_principal("demo").as_str(),
                "User:admin"
            ]
        );
    }

    #[test]
    fn authorization_alone_secures_the_brokers_own_traffic() {
        let s = spec(serde_json::json!({"authorization": {"type": "simple"}}));
        let l = layout(&s);
        assert!(l.secured());
        assert_eq!(
            l.listeners_config(),
            "PLAINTEXT://$(POD_IP):9092,REPLICATION://$(POD_IP):9090"
        );
        // plaintext clients keep the pod IP unless told otherwise
        assert_eq!(advertised_address(&s), AdvertisedAddress::PodIp);
    }

    #[test]
    fn the_configs_pass_the_brokers_own_check() {
        let s = spec(serde_json::json!({
            "listeners": [
                {"name": "tls", "port": 9093, "tls": true, "authentication": {"type": "scram-sha-512"}},
                {"name": "mtls", "port": 9094, "tls": true, "authentication": {"type": "tls"}}
            ],
            "authorization": {"type": "simple"}
        }));
        let props = layout(&s).broker_properties("demo");
        let problems = moldau_broker::config_check::check(&props);
        assert!(problems.is_empty(), "{problems:?}");
    }
}
