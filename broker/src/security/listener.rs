//! The broker's named listeners and their security, read from Kafka's
//! broker configs (issue 38): `listeners` and `advertised.listeners`
//! (`NAME://host:port`, comma separated), `listener.security.protocol.map`
//! (`NAME:PROTOCOL`, Kafka's default maps each protocol's own name to
//! itself), `inter.broker.listener.name` (or
//! `security.inter.broker.protocol`), and for SASL listeners
//! `sasl.enabled.mechanisms` and the PLAIN users of a JAAS config
//! (`listener.name.<name>.plain.sasl.jaas.config`, else
//! `listener.name.<name>.sasl.jaas.config`, else `sasl.jaas.config`), each
//! overridable per listener with Kafka's `listener.name.<name>.` prefix.
//! An SSL or SASL_SSL listener's `ssl.*` configs are read by
//! [`super::tls::tls_settings`] with the same per-listener prefix.
//!
//! [`listeners`] refuses what Kafka refuses, with Kafka's words: two
//! listeners on one port (port 0, ephemeral, aside), an advertised
//! listener `listeners` does not name or on 0.0.0.0, a listener without
//! a security protocol, and an inter-broker listener that is not defined.
//! The inter-broker listener defaults as in Kafka (the listener named
//! after `security.inter.broker.protocol`, PLAINTEXT), except that a
//! broker with a single listener uses that one.
//!
//! Pure: the caller hands in the properties.

use std::collections::BTreeMap;

use super::scram::ScramMechanism;

/// Kafka's security protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Case-insensitive, as Kafka reads it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether a connection must authenticate with SASL first.
    pub fn is_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    pub fn is_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

/// A SASL mechanism clients may use (the brokers' own `MOLDAU-BROKER`
/// is always there besides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    Plain,
    Scram(ScramMechanism),
    OAuthBearer,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => super::plain::MECHANISM,
            SaslMechanism::Scram(m) => m.name(),
            SaslMechanism::OAuthBearer => super::oauthbearer::MECHANISM,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        if name == super::plain::MECHANISM {
            return Some(SaslMechanism::Plain);
        }
        if name == super::oauthbearer::MECHANISM {
            return Some(SaslMechanism::OAuthBearer);
        }
        ScramMechanism::from_name(name).map(SaslMechanism::Scram)
    }
}

/// One entry of `listeners` or `advertised.listeners`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The listener's name, upper-cased as Kafka normalises it.
    pub name: String,
    /// Empty: every interface (`listeners` only).
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// `host:port` (an IPv6 host in brackets).
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses `NAME://host:port,…`.
pub fn parse_endpoints(value: &str) -> Result<Vec<Endpoint>, String> {
    let mut out: Vec<Endpoint> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, rest) = entry
            .split_once("://")
            .ok_or_else(|| format!("{entry:?} is not NAME://host:port"))?;
        let name = name.trim().to_ascii_uppercase();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "{entry:?}: a listener name is letters, digits, _ and -"
            ));
        }
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{entry:?} has no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{entry:?}: {port:?} is not a port"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if out.iter().any(|e| e.name == name) {
            return Err(format!("listener {name} is named twice"));
        }
        out.push(Endpoint { name, host, port });
    }
    Ok(out)
}

/// Kafka's default `listener.security.protocol.map`: each protocol's
/// name to itself.
pub fn default_protocol_map() -> BTreeMap<String, SecurityProtocol> {
    SecurityProtocol::ALL
        .into_iter()
        .map(|p| (p.name().to_string(), p))
        .collect()
}

/// Parses `NAME:PROTOCOL,…`.
pub fn parse_protocol_map(value: &str) -> Result<BTreeMap<String, SecurityProtocol>, String> {
    let mut map = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, protocol) = entry
            .split_once(':')
            .ok_or_else(|| format!("{entry:?} is not NAME:PROTOCOL"))?;
        let protocol = SecurityProtocol::from_name(protocol)
            .ok_or_else(|| format!("{protocol:?} is not a security protocol"))?;
        if map
            .insert(name.trim().to_ascii_uppercase(), protocol)
            .is_some()
        {
            return Err(format!("{name} is mapped twice"));
        }
    }
    Ok(map)
}

/// Parses `sasl.enabled.mechanisms`. GSSAPI is Kafka's too but not
/// served: named, it is refused rather than silently dropped.
pub fn parse_mechanisms(value: &str) -> Result<Vec<SaslMechanism>, String> {
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let m = SaslMechanism::from_name(name).ok_or_else(|| {
            format!(
                "SASL mechanism {name} is not served (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER are)"
            )
        })?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// The mechanisms a SASL listener offers when `sasl.enabled.mechanisms`
/// is not set. Kafka's default is GSSAPI, which Moldau does not serve;
/// the SCRAM pair is the useful default without a Kerberos realm.
pub const DEFAULT_MECHANISMS: [SaslMechanism; 2] = [
    SaslMechanism::Scram(ScramMechanism::Sha256),
    SaslMechanism::Scram(ScramMechanism::Sha512),
];

/// Kafka's `connection.failed.authentication.delay.ms` default.
pub const DEFAULT_FAILED_AUTHENTICATION_DELAY_MS: u64 = 100;

/// The client listener: its name, protocol, where it binds and what it
/// advertises (both `None` when `listeners` is not set: the command
/// line's `--listen` and `--advertised-listener` then), and its SASL
/// settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientListener {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub bind: Option<Endpoint>,
    pub advertised: Option<Endpoint>,
    /// The mechanisms a SASL listener offers (empty on a plaintext one).
    pub mechanisms: Vec<SaslMechanism>,
    /// PLAIN's users and passwords, from the JAAS config.
    pub plain_users: BTreeMap<String, String>,
    /// `connection.failed.authentication.delay.ms`.
    pub failed_authentication_delay_ms: u64,
    /// `connections.max.reauth.ms` (KIP-368): a SASL session's lifetime,
    /// after which the client must re-authenticate; 0 (Kafka's default):
    /// sessions last as long as their connection.
    pub max_reauth_ms: u64,
    /// An SSL or SASL_SSL listener's TLS settings (`None` otherwise).
    pub tls: Option<super::tls::TlsSettings>,
    /// OAUTHBEARER's validator, when the listener offers it.
    pub oauth: Option<super::jwks::OAuthListener>,
}

impl Default for ClientListener {
    /// Kafka's default listener: `PLAINTEXT`, anonymous clients.
    fn default() -> Self {
        Self {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            bind: None,
            advertised: None,
            mechanisms: Vec::new(),
            plain_users: BTreeMap::new(),
            failed_authentication_delay_ms: DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
            max_reauth_ms: 0,
            tls: None,
            oauth: None,
        }
    }
}

impl ClientListener {
    /// Whether clients must authenticate before anything else.
    pub fn requires_sasl(&self) -> bool {
        self.protocol.is_sasl()
    }

    pub fn offers(&self, mechanism: SaslMechanism) -> bool {
        self.mechanisms.contains(&mechanism)
    }
}

/// A config of `props` for `listener` (Kafka's `listener.name.<name>.`
/// prefix, lower-cased name) before the plain one.
fn per_listener<'a>(
    props: &'a BTreeMap<String, String>,
    listener: &str,
    key: &str,
) -> Option<&'a str> {
    let prefixed = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
    props
        .get(&prefixed)
        .or_else(|| props.get(key))
        .map(String::as_str)
}

/// The listeners a broker serves (`listeners`, in its order) and which
/// of them brokers use to reach each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    /// Never empty; names are distinct.
    pub all: Vec<ClientListener>,
    /// The name of the inter-broker listener (one of `all`).
    pub inter_broker: String,
}

impl Default for Listeners {
    /// Without `listeners`: Kafka's one PLAINTEXT listener, bound and
    /// advertised as the command line says.
    fn default() -> Self {
        Self {
            all: vec![ClientListener::default()],
            inter_broker: "PLAINTEXT".into(),
        }
    }
}

impl Listeners {
    /// The listener named `name` (upper-case), if served.
    pub fn get(&self, name: &str) -> Option<&ClientListener> {
        self.all.iter().find(|l| l.name == name)
    }

    /// The listener brokers dial each other on.
    pub fn inter_broker(&self) -> &ClientListener {
        // `listeners` checks that the name is one of `all`
        self.get(&self.inter_broker).unwrap_or(&self.all[0])
    }
}

/// The inter-broker listener's name by Kafka's rule:
/// `inter.broker.listener.name`, else the listener named after
/// `security.inter.broker.protocol` (PLAINTEXT by default) — and, a
/// Moldau convenience, the only listener when there is one and neither
/// is set. Kafka refuses both set at once.
pub fn inter_broker_listener_name(
    props: &BTreeMap<String, String>,
    listeners: &[Endpoint],
) -> Result<String, String> {
    let set = |key: &str| props.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
    let name = match (
        set("inter.broker.listener.name"),
        set("security.inter.broker.protocol"),
    ) {
        (Some(_), Some(_)) => {
            return Err(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set".into(),
            )
        }
        (Some(name), None) => name.to_ascii_uppercase(),
        (None, Some(protocol)) => SecurityProtocol::from_name(protocol)
            .ok_or_else(|| {
                format!("security.inter.broker.protocol: {protocol:?} is not a security protocol")
            })?
            .name()
            .to_string(),
        (None, None) => match listeners {
            [only] => only.name.clone(),
            _ => SecurityProtocol::Plaintext.name().to_string(),
        },
    };
    if !listeners.iter().any(|l| l.name == name) {
        return Err(format!(
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options based on currently configured listeners are {}; the inter-broker listener is {name}",
            names(listeners)
        ));
    }
    Ok(name)
}

fn names(endpoints: &[Endpoint]) -> String {
    endpoints
        .iter()
        .map(|e| e.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// Kafka's checks of `listeners` against itself and
/// `advertised.listeners`: distinct ports (port 0, an ephemeral port, is
/// never a duplicate), advertised names a subset of the listeners', and
/// no advertised listener on the non-routable 0.0.0.0 or without a host.
pub fn validate_endpoints(listeners: &[Endpoint], advertised: &[Endpoint]) -> Result<(), String> {
    if listeners.is_empty() {
        return Err("listeners is empty".into());
    }
    for (i, a) in listeners.iter().enumerate() {
        if let Some(b) = listeners[..i]
            .iter()
            .find(|b| a.port != 0 && b.port == a.port)
        {
            return Err(format!(
                "Each listener must have a different port: {} and {} both use port {}",
                b.name, a.name, a.port
            ));
        }
    }
    for a in advertised {
        if !listeners.iter().any(|l| l.name == a.name) {
            return Err(format!(
                "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. Found {}. The valid options based on currently configured listeners are {}",
                names(advertised),
                names(listeners)
            ));
        }
        if a.host.is_empty() {
            return Err(format!("advertised listener {} has no host", a.name));
        }
        if a.host == "0.0.0.0" || a.host == "::" {
            return Err(format!(
                "advertised.listeners cannot use the nonroutable meta-address {}: listener {}",
                a.host, a.name
            ));
        }
    }
    Ok(())
}

/// The listeners `props` describe (see the module doc), validated as
/// Kafka validates them.
pub fn listeners(props: &BTreeMap<String, String>) -> Result<Listeners, String> {
    let map = match props.get("listener.security.protocol.map") {
        Some(v) => parse_protocol_map(v)?,
        None => default_protocol_map(),
    };
    let Some(value) = props.get("listeners") else {
        return Ok(Listeners::default());
    };
    let endpoints = parse_endpoints(value)?;
    let advertised = match props.get("advertised.listeners") {
        Some(v) => parse_endpoints(v)?,
        None => Vec::new(),
    };
    validate_endpoints(&endpoints, &advertised)?;
    let inter_broker = inter_broker_listener_name(props, &endpoints)?;
    let mut all = Vec::with_capacity(endpoints.len());
    for bind in endpoints {
        let protocol = *map.get(&bind.name).ok_or_else(|| {
            format!(
                "No security protocol defined for listener {} in listener.security.protocol.map",
                bind.name
            )
        })?;
        let mine = advertised.iter().find(|a| a.name == bind.name).cloned();
        all.push(listener(props, bind, protocol, mine)?);
    }
    Ok(Listeners { all, inter_broker })
}

/// One listener's settings, its `listener.name.<name>.` configs first.
fn listener(
    props: &BTreeMap<String, String>,
    bind: Endpoint,
    protocol: SecurityProtocol,
    advertised: Option<Endpoint>,
) -> Result<ClientListener, String> {
    let mut listener = ClientListener {
        name: bind.name.clone(),
        protocol,
        bind: Some(bind),
        advertised,
        ..ClientListener::default()
    };
    if let Some(v) = props.get("connection.failed.authentication.delay.ms") {
        listener.failed_authentication_delay_ms = v.trim().parse().map_err(|_| {
            format!("connection.failed.authentication.delay.ms: {v:?} is not a number")
        })?;
    }
    if protocol.is_tls() {
        let name = listener.name.clone();
        listener.tls = Some(
            super::tls::tls_settings(|key| per_listener(props, &name, key))
                .map_err(|e| format!("listener {name}: {e}"))?,
        );
    }
    if !protocol.is_sasl() {
        return Ok(listener);
    }
    if let Some(v) = per_listener(props, &listener.name, "connections.max.reauth.ms") {
        listener.max_reauth_ms = v
            .trim()
            .parse()
            .map_err(|_| format!("connections.max.reauth.ms: {v:?} is not a number"))?;
    }
    listener.mechanisms = match per_listener(props, &listener.name, "sasl.enabled.mechanisms") {
        Some(v) => parse_mechanisms(v)?,
        None => DEFAULT_MECHANISMS.to_vec(),
    };
    if listener.offers(SaslMechanism::Plain) {
        let jaas = per_listener(props, &listener.name, "plain.sasl.jaas.config")
            .or_else(|| per_listener(props, &listener.name, "sasl.jaas.config"))
            .ok_or_else(|| {
                format!(
                    "listener {} offers PLAIN but no JAAS config names its users (listener.name.{}.plain.sasl.jaas.config)",
                    listener.name,
                    listener.name.to_ascii_lowercase()
                )
            })?;
        listener.plain_users = super::jaas::plain_users(jaas)?;
    }
    if listener.offers(SaslMechanism::OAuthBearer) {
        let name = listener.name.clone();
        // Kafka's prefixes: listener and mechanism, listener, none
        let config = |key: &str| {
            props
                .get(&format!(
                    "listener.name.{}.oauthbearer.{key}",
                    name.to_ascii_lowercase()
                ))
                .map(String::as_str)
                .or_else(|| per_listener(props, &name, key))
                .map(String::from)
        };
        let jaas = config("sasl.jaas.config");
        let settings = super::oauthbearer::settings(config, jaas.as_deref())
            .map_err(|e| format!("listener {name}: {e}"))?;
        listener.oauth = Some(super::jwks::OAuthListener {
            settings,
            keys: Default::default(),
        });
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The only listener `pairs` describe.
    fn client_listener(pairs: &BTreeMap<String, String>) -> Result<ClientListener, String> {
        let mut all = listeners(pairs)?;
        assert_eq!(all.all.len(), 1);
        Ok(all.all.remove(0))
    }

    #[test]
    fn without_listeners_the_listener_is_kafka_s_plaintext_default() {
        let all = listeners(&props(&[])).unwrap();
        assert_eq!(all, Listeners::default());
        assert_eq!(all.inter_broker().name, "PLAINTEXT");
        let l = client_listener(&props(&[])).unwrap();
        assert_eq!(l, ClientListener::default());
        assert!(!l.requires_sasl());
    }

    #[test]
    fn several_listeners_each_take_their_own_protocol_and_settings() {
        let all = listeners(&props(&[
            (
                "listeners",
                "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9094,SECURE://127.0.0.1:9093",
            ),
            (
                "listener.security.protocol.map",
                "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT,SECURE:SSL",
            ),
            ("advertised.listeners", "EXTERNAL://broker-0.example:19094"),
            ("inter.broker.listener.name", "internal"),
            ("listener.name.external.sasl.enabled.mechanisms", "PLAIN"),
            (
                "listener.name.external.plain.sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a";"#,
            ),
            ("listener.name.secure.ssl.keystore.location", "/secure.pem"),
            ("ssl.keystore.type", "PEM"),
        ]))
        .unwrap();
        assert_eq!(all.inter_broker, "INTERNAL");
        assert_eq!(all.inter_broker().protocol, SecurityProtocol::Plaintext);
        let names: Vec<_> = all.all.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["INTERNAL", "EXTERNAL", "SECURE"]);
        let external = all.get("EXTERNAL").unwrap();
        assert_eq!(external.protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(external.mechanisms, vec![SaslMechanism::Plain]);
        assert_eq!(
            external.advertised.as_ref().unwrap().address(),
            "broker-0.example:19094"
        );
        assert_eq!(
            all.get("INTERNAL").unwrap().advertised,
            None,
            "advertised.listeners may name a subset: the rest advertise their listeners' address"
        );
        assert!(all.get("INTERNAL").unwrap().plain_users.is_empty());
        let secure = all.get("SECURE").unwrap();
        assert_eq!(
            secure.tls.as_ref().unwrap().keystore,
            super::super::tls::KeyStore::File("/secure.pem".into())
        );
        assert!(all.get("INTERNAL").unwrap().tls.is_none());
    }

    #[test]
    fn the_inter_broker_listener_follows_kafka_s_rule() {
        let two = "PLAINTEXT://:9092,SASL_PLAINTEXT://:9094";
        let sasl = [
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "SCRAM-SHA-256",
            ),
            ("listeners", two),
        ];
        let with = |extra: &[(&str, &str)]| {
            let mut p = props(&sasl);
            p.extend(props(extra));
            listeners(&p).map(|l| l.inter_broker)
        };
        assert_eq!(with(&[]).unwrap(), "PLAINTEXT", "Kafka's default protocol");
        assert_eq!(
            with(&[("security.inter.broker.protocol", "SASL_PLAINTEXT")]).unwrap(),
            "SASL_PLAINTEXT"
        );
        assert_eq!(
            with(&[("inter.broker.listener.name", "sasl_plaintext")]).unwrap(),
            "SASL_PLAINTEXT"
        );
        let one = listeners(&props(&[
            ("listeners", "CLIENT://:9092"),
            ("listener.security.protocol.map", "CLIENT:PLAINTEXT"),
        ]))
        .unwrap();
        assert_eq!(one.inter_broker, "CLIENT", "the only listener");
        for (extra, why) in [
            (
                vec![
                    ("security.inter.broker.protocol", "PLAINTEXT"),
                    ("inter.broker.listener.name", "PLAINTEXT"),
                ],
                "Only one of inter.broker.listener.name and security.inter.broker.protocol",
            ),
            (
                vec![("inter.broker.listener.name", "OTHER")],
                "inter.broker.listener.name must be a listener name defined in advertised.listeners",
            ),
            (
                vec![("security.inter.broker.protocol", "SSL")],
                "The valid options based on currently configured listeners are PLAINTEXT,SASL_PLAINTEXT",
            ),
        ] {
            let err = with(&extra).unwrap_err();
            assert!(err.contains(why), "{extra:?}: {err}");
        }
        let err = listeners(&props(&[
            ("listeners", "A://:9092,B://:9093"),
            ("listener.security.protocol.map", "A:PLAINTEXT,B:PLAINTEXT"),
        ]))
        .unwrap_err();
        assert!(err.contains("inter.broker.listener.name"), "{err}");
    }

    #[test]
    fn a_sasl_listener_takes_its_protocol_mechanisms_and_users() {
        let l = client_listener(&props(&[
            ("listeners", "SASL_PLAINTEXT://127.0.0.1:9094"),
            ("advertised.listeners", "SASL_PLAINTEXT://broker-0.example:9094"),
            ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512"),
            (
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a-secret";"#,
            ),
        ]))
        .unwrap();
        assert_eq!(l.protocol, SecurityProtocol::SaslPlaintext);
        assert!(l.requires_sasl());
        assert_eq!(l.bind.as_ref().unwrap().address(), "127.0.0.1:9094");
        assert_eq!(
            l.advertised.as_ref().unwrap().address(),
            "broker-0.example:9094"
        );
        assert_eq!(
            l.mechanisms,
            vec![
                SaslMechanism::Plain,
                SaslMechanism::Scram(ScramMechanism::Sha512)
            ]
        );
        assert_eq!(l.plain_users["alice"], "a-secret");
    }

    #[test]
    fn a_named_listener_is_mapped_and_per_listener_settings_win() {
        let l = client_listener(&props(&[
            ("listeners", "CLIENT://:9092"),
            ("listener.security.protocol.map", "CLIENT:SASL_PLAINTEXT"),
            ("sasl.enabled.mechanisms", "PLAIN"),
            (
                "listener.name.client.sasl.enabled.mechanisms",
                "SCRAM-SHA-256",
            ),
        ]))
        .unwrap();
        assert_eq!(l.name, "CLIENT");
        assert_eq!(l.bind.as_ref().unwrap().host, "");
        assert_eq!(
            l.mechanisms,
            vec![SaslMechanism::Scram(ScramMechanism::Sha256)]
        );
        let default = client_listener(&props(&[("listeners", "SASL_PLAINTEXT://:9092")])).unwrap();
        assert_eq!(default.mechanisms, DEFAULT_MECHANISMS.to_vec());
    }

    #[test]
    fn what_cannot_be_served_is_refused_with_a_reason() {
        for (pairs, why) in [
            (
                vec![("listeners", "PLAINTEXT://:9092,SASL_PLAINTEXT://:9092")],
                "Each listener must have a different port",
            ),
            (
                vec![
                    ("listeners", "PLAINTEXT://:9092"),
                    ("advertised.listeners", "PLAINTEXT://0.0.0.0:9092"),
                ],
                "nonroutable meta-address",
            ),
            (vec![("listeners", "SSL://:9093")], "ssl.keystore.location"),
            (
                vec![("listeners", "CLIENT://:9092")],
                "No security protocol defined for listener CLIENT",
            ),
            (
                vec![
                    ("listeners", "SASL_PLAINTEXT://:9092"),
                    ("sasl.enabled.mechanisms", "GSSAPI"),
                ],
                "not served",
            ),
            (
                vec![
                    ("listeners", "SASL_PLAINTEXT://:9092"),
                    ("sasl.enabled.mechanisms", "PLAIN"),
                ],
                "JAAS",
            ),
            (
                vec![
                    ("listeners", "PLAINTEXT://:9092"),
                    ("advertised.listeners", "OTHER://h:1"),
                ],
                "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners",
            ),
            (vec![("listeners", "PLAINTEXT://:x")], "not a port"),
            (vec![("listeners", "nothing")], "NAME://host:port"),
        ] {
            let err = client_listener(&props(&pairs)).unwrap_err();
            assert!(err.contains(why), "{pairs:?}: {err}");
        }
    }

    #[test]
    fn a_tls_listener_reads_its_ssl_configs_with_the_listener_prefix() {
        let l = client_listener(&props(&[
            ("listeners", "SECURE://127.0.0.1:9093"),
            ("listener.security.protocol.map", "SECURE:SASL_SSL"),
            ("ssl.keystore.location", "/plain.pem"),
            ("listener.name.secure.ssl.keystore.location", "/secure.pem"),
            ("ssl.keystore.type", "PEM"),
        ]))
        .unwrap();
        assert_eq!(l.protocol, SecurityProtocol::SaslSsl);
        assert!(l.requires_sasl());
        let tls = l.tls.expect("TLS settings");
        assert_eq!(
            tls.keystore,
            super::super::tls::KeyStore::File("/secure.pem".into())
        );
        let plain = client_listener(&props(&[("listeners", "SASL_PLAINTEXT://:1")])).unwrap();
        assert_eq!(plain.tls, None);
    }

    #[test]
    fn endpoints_and_maps_parse_as_kafka_writes_them() {
        let e = parse_endpoints("plaintext://[::1]:9092, SASL_PLAINTEXT://host:9094").unwrap();
        assert_eq!(e[0].name, "PLAINTEXT");
        assert_eq!(e[0].address(), "[::1]:9092");
        assert_eq!(e[1].port, 9094);
        assert!(
            parse_endpoints("A://h:1,a://h:2").is_err(),
            "names are case-insensitive"
        );
        let m = parse_protocol_map("internal:plaintext,EXTERNAL:SASL_SSL").unwrap();
        assert_eq!(m["INTERNAL"], SecurityProtocol::Plaintext);
        assert_eq!(m["EXTERNAL"], SecurityProtocol::SaslSsl);
        assert!(parse_protocol_map("X:TLS").is_err());
    }
}
