//! TLS for a listener (issue 38): Kafka's `ssl.*` configs of an
//! SSL or SASL_SSL listener (each overridable with the listener's
//! `listener.name.<name>.` prefix) turned into rustls configurations, the
//! mTLS principal of a client certificate (its subject in RFC 2253 form
//! through `ssl.principal.mapping.rules`), and the holder that re-reads
//! the PEM files when they change.
//!
//! Owns: [`tls_settings`] (pure: the configs to [`TlsSettings`], files
//! only named), [`TlsSettings::build`] (reads the named PEM files — the
//! only I/O of `security` — into a rustls `ServerConfig`, and the
//! `ClientConfig` brokers dial each other's TLS listener with),
//! [`PrincipalMapper`] and [`subject_dn`] (pure), and [`TlsState`] (the
//! current configurations, swapped when the files change). It must not
//! touch sockets: the handshake and the accept loop are
//! `protocol::connection`'s and `server`'s.
//!
//! Decisions:
//! - Only PEM key and trust stores are read (`ssl.keystore.type` and
//!   `ssl.truststore.type` unset or `PEM`); JKS and PKCS12 are refused at
//!   start with a message, never ignored. The key must be unencrypted
//!   (PKCS#8, PKCS#1 or SEC1): a set `ssl.key.password` or an encrypted
//!   PEM key is refused at start.
//! - `ssl.enabled.protocols` takes `TLSv1.2` and `TLSv1.3` (Kafka's
//!   default, both); older versions are refused (rustls has none).
//!   `ssl.protocol=TLSv1.2` leaves TLS 1.3 out, as it does for Kafka's
//!   clients.
//! - Brokers dial other brokers' TLS listener (replica fetches,
//!   transaction markers) trusting the listener's own truststore, and
//!   present the listener's keystore as their client certificate (so
//!   `ssl.client.auth=required` works between brokers; a certificate
//!   with an extended key usage must then allow clientAuth too). Without
//!   a truststore a broker cannot verify its peers: [`TlsConfigs::client`]
//!   is `None`, and a cluster-mode broker refuses to start (standalone
//!   never dials itself). The peer's name is checked against the host it
//!   advertises unless `ssl.endpoint.identification.algorithm` is empty,
//!   as in Kafka.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::{Mutex, RwLock};
use regex::Regex;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// Where PEM text comes from: a file (re-read when it changes) or the
/// config value itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    File(PathBuf),
    Inline(String),
}

/// The listener's own key and certificate chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyStore {
    /// `ssl.keystore.location`: one PEM file with the private key and the
    /// certificate chain (Kafka's PEM keystore file).
    File(PathBuf),
    /// `ssl.keystore.certificate.chain` and `ssl.keystore.key`.
    Inline { chain: String, key: String },
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// A TLS version of `ssl.enabled.protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    V1_2,
    V1_3,
}

impl TlsVersion {
    fn from_name(name: &str) -> Option<Self> {
        match name.trim() {
            "TLSv1.2" => Some(TlsVersion::V1_2),
            "TLSv1.3" => Some(TlsVersion::V1_3),
            _ => None,
        }
    }

    fn rustls(self) -> &'static rustls::SupportedProtocolVersion {
        match self {
            TlsVersion::V1_2 => &rustls::version::TLS12,
            TlsVersion::V1_3 => &rustls::version::TLS13,
        }
    }
}

/// How often the PEM files are checked for changes by default
/// (`ssl.reload.interval.ms`, Moldau's own).
pub const DEFAULT_RELOAD_INTERVAL_MS: u64 = 5_000;

/// A TLS listener's settings, as its configs say (no file read yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub keystore: KeyStore,
    pub truststore: Option<PemSource>,
    pub client_auth: ClientAuth,
    pub versions: Vec<TlsVersion>,
    /// `ssl.endpoint.identification.algorithm` is `https` (the default):
    /// a broker dialing another checks the name on its certificate.
    pub endpoint_identification: bool,
    pub principal_mapper: PrincipalMapper,
    pub reload_interval_ms: u64,
}

/// The TLS settings of listener `listener` from its configs; `get` looks
/// a config up with the listener's prefix first (see
/// `listener::listeners`). Pure.
pub fn tls_settings<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<TlsSettings, String> {
    let set = |key: &str| get(key).map(str::trim).filter(|v| !v.is_empty());
    for (key, default) in [("ssl.keystore.type", "JKS"), ("ssl.truststore.type", "JKS")] {
        if let Some(t) = set(key) {
            if !t.eq_ignore_ascii_case("PEM") {
                return Err(format!(
                    "{key}={t}: Moldau reads PEM stores only (Kafka's default {default} is not served); set {key}=PEM"
                ));
            }
        }
    }
    if set("ssl.key.password").is_some() {
        return Err(
            "ssl.key.password is set: Moldau reads only unencrypted PEM private keys (PKCS#8, PKCS#1 or SEC1); decrypt the key (openssl pkcs8 -nocrypt) and drop ssl.key.password".into(),
        );
    }
    let keystore = match (
        set("ssl.keystore.location"),
        set("ssl.keystore.certificate.chain"),
        set("ssl.keystore.key"),
    ) {
        (Some(path), None, None) => KeyStore::File(PathBuf::from(path)),
        (None, Some(chain), Some(key)) => KeyStore::Inline {
            chain: chain.to_string(),
            key: key.to_string(),
        },
        (None, None, None) => {
            return Err(
                "a TLS listener needs its key and certificates: ssl.keystore.location (a PEM file with the key and the chain), or ssl.keystore.certificate.chain and ssl.keystore.key".into(),
            )
        }
        _ => {
            return Err(
                "set either ssl.keystore.location or both ssl.keystore.certificate.chain and ssl.keystore.key".into(),
            )
        }
    };
    let truststore = match (
        set("ssl.truststore.location"),
        set("ssl.truststore.certificates"),
    ) {
        (Some(path), None) => Some(PemSource::File(PathBuf::from(path))),
        (None, Some(pem)) => Some(PemSource::Inline(pem.to_string())),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(
                "set either ssl.truststore.location or ssl.truststore.certificates, not both"
                    .into(),
            )
        }
    };
    let client_auth = match set("ssl.client.auth")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("none") => ClientAuth::None,
        Some("requested") => ClientAuth::Requested,
        Some("required") => ClientAuth::Required,
        Some(other) => {
            return Err(format!(
                "ssl.client.auth={other}: one of required, requested, none"
            ))
        }
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        return Err(format!(
            "ssl.client.auth is {}: client certificates are checked against a truststore (ssl.truststore.location or ssl.truststore.certificates)",
            if client_auth == ClientAuth::Required { "required" } else { "requested" }
        ));
    }
    let mut versions = Vec::new();
    for name in set("ssl.enabled.protocols")
        .unwrap_or("TLSv1.2,TLSv1.3")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let v = TlsVersion::from_name(name).ok_or_else(|| {
            format!("ssl.enabled.protocols: {name} is not served (TLSv1.2 and TLSv1.3 are)")
        })?;
        if !versions.contains(&v) {
            versions.push(v);
        }
    }
    match set("ssl.protocol") {
        None | Some("TLS") | Some("TLSv1.3") => {}
        Some("TLSv1.2") => versions.retain(|v| *v == TlsVersion::V1_2),
        Some(other) => {
            return Err(format!(
                "ssl.protocol={other}: one of TLSv1.3, TLSv1.2, TLS"
            ))
        }
    }
    versions.sort();
    if versions.is_empty() {
        return Err("ssl.enabled.protocols and ssl.protocol leave no TLS version".into());
    }
    let endpoint_identification = match get("ssl.endpoint.identification.algorithm") {
        None => true,
        Some(v) if v.trim().is_empty() => false,
        Some(v) if v.trim().eq_ignore_ascii_case("https") => true,
        Some(v) => {
            return Err(format!(
                "ssl.endpoint.identification.algorithm={v}: https or empty"
            ))
        }
    };
    let principal_mapper =
        PrincipalMapper::parse(set("ssl.principal.mapping.rules").unwrap_or("DEFAULT"))
            .map_err(|e| format!("ssl.principal.mapping.rules: {e}"))?;
    let reload_interval_ms = match set("ssl.reload.interval.ms") {
        None => DEFAULT_RELOAD_INTERVAL_MS,
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|ms| *ms >= 100)
            .ok_or_else(|| format!("ssl.reload.interval.ms: {v:?} is not a number >= 100"))?,
    };
    Ok(TlsSettings {
        keystore,
        truststore,
        client_auth,
        versions,
        endpoint_identification,
        principal_mapper,
        reload_interval_ms,
    })
}

/// The ALPN name of HTTP/2, which the controller's gRPC speaks.
const HTTP2_ALPN: &[u8] = b"h2";

/// The rustls configurations of a TLS listener.
#[derive(Debug, Clone)]
pub struct TlsConfigs {
    /// What clients connecting to the listener get.
    pub server: Arc<ServerConfig>,
    /// What this broker dials other brokers' listeners with: `None`
    /// without a truststore (nothing to verify them against).
    pub client: Option<Arc<ClientConfig>>,
    /// What the controller's gRPC endpoint serves when this is the
    /// inter-broker listener: a client certificate the truststore
    /// verifies is required whatever `ssl.client.auth` says, and HTTP/2 is
    /// offered by ALPN (`None` without a truststore).
    pub controller_server: Option<Arc<ServerConfig>>,
    /// What a broker dials the controller's endpoint with: `client`
    /// offering HTTP/2 by ALPN.
    pub controller_client: Option<Arc<ClientConfig>>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_pem(source: &PemSource, what: &str) -> Result<Vec<u8>, String> {
    match source {
        PemSource::Inline(text) => Ok(text.as_bytes().to_vec()),
        PemSource::File(path) => {
            std::fs::read(path).map_err(|e| format!("{what} {}: {e}", path.display()))
        }
    }
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what}: no CERTIFICATE in it"));
    }
    Ok(certs)
}

fn private_key(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, String> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(format!(
            "{what}: the private key is encrypted; Moldau reads only unencrypted PEM keys (openssl pkcs8 -nocrypt decrypts it)"
        ));
    }
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("{what}: no private key ({e})"))
}

impl TlsSettings {
    /// The files the settings name, watched for changes.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if let KeyStore::File(p) = &self.keystore {
            files.push(p.clone());
        }
        if let Some(PemSource::File(p)) = &self.truststore {
            files.push(p.clone());
        }
        files
    }

    /// Reads the key, chain and CAs and builds the listener's
    /// configurations; any problem is an error naming the config.
    pub fn build(&self) -> Result<TlsConfigs, String> {
        let (chain, key) = match &self.keystore {
            KeyStore::File(path) => {
                let what = format!("ssl.keystore.location {}", path.display());
                let pem = read_pem(&PemSource::File(path.clone()), "ssl.keystore.location")?;
                (certificates(&pem, &what)?, private_key(&pem, &what)?)
            }
            KeyStore::Inline { chain, key } => (
                certificates(chain.as_bytes(), "ssl.keystore.certificate.chain")?,
                private_key(key.as_bytes(), "ssl.keystore.key")?,
            ),
        };
        let roots = match &self.truststore {
            None => None,
            Some(source) => {
                let what = match source {
                    PemSource::File(p) => format!("ssl.truststore.location {}", p.display()),
                    PemSource::Inline(_) => "ssl.truststore.certificates".to_string(),
                };
                let mut roots = RootCertStore::empty();
                for cert in certificates(&read_pem(source, &what)?, &what)? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("{what}: a CA certificate is unusable ({e})"))?;
                }
                Some(Arc::new(roots))
            }
        };
        let versions: Vec<&'static rustls::SupportedProtocolVersion> =
            self.versions.iter().map(|v| v.rustls()).collect();
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .map_err(|e| format!("TLS versions: {e}"))?;
        let builder = match (self.client_auth, &roots) {
            (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
            (auth, Some(roots)) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
                let verifier = if auth == ClientAuth::Requested {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                builder.with_client_cert_verifier(
                    verifier
                        .build()
                        .map_err(|e| format!("ssl.truststore: {e}"))?,
                )
            }
        };
        let server = builder
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| {
                format!("ssl.keystore: the key and the certificate do not go together ({e})")
            })?;
        let controller_server = match &roots {
            None => None,
            Some(roots) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                        .build()
                        .map_err(|e| format!("ssl.truststore: {e}"))?;
                let mut config = ServerConfig::builder_with_provider(provider())
                    .with_protocol_versions(&versions)
                    .map_err(|e| format!("TLS versions: {e}"))?
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(chain.clone(), key.clone_key())
                    .map_err(|e| {
                        format!(
                            "ssl.keystore: the key and the certificate do not go together ({e})"
                        )
                    })?;
                config.alpn_protocols = vec![HTTP2_ALPN.to_vec()];
                Some(Arc::new(config))
            }
        };
        let client = match roots {
            None => None,
            Some(roots) => {
                let builder = ClientConfig::builder_with_provider(provider())
                    .with_protocol_versions(&versions)
                    .map_err(|e| format!("TLS versions: {e}"))?;
                let builder = if self.endpoint_identification {
                    builder.with_root_certificates(roots)
                } else {
                    let inner = WebPkiServerVerifier::builder_with_provider(roots, provider())
                        .build()
                        .map_err(|e| format!("ssl.truststore: {e}"))?;
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(AnyName(inner)))
                };
                let config = builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("ssl.keystore: {e}"))?;
                Some(Arc::new(config))
            }
        };
        let controller_client = client.as_ref().map(|c| {
            let mut config = (**c).clone();
            config.alpn_protocols = vec![HTTP2_ALPN.to_vec()];
            Arc::new(config)
        });
        Ok(TlsConfigs {
            server: Arc::new(server),
            client,
            controller_server,
            controller_client,
        })
    }
}

/// A server verifier that checks the chain but not the name
/// (`ssl.endpoint.identification.algorithm=` empty, as Kafka allows).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// What one check of the files found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    /// New configurations are in place.
    Reloaded,
    /// The files changed but do not make a configuration: the old one
    /// stays (why).
    Failed(String),
}

/// A file's identity for change detection: modification time and size
/// (`None`: cannot be read now).
type Fingerprint = Vec<Option<(SystemTime, u64)>>;

/// A TLS listener's current configurations, swapped when its files
/// change (rotation without a restart: new connections get the new
/// certificate, open ones keep theirs).
#[derive(Debug)]
pub struct TlsState {
    settings: TlsSettings,
    current: RwLock<TlsConfigs>,
    /// The files as last looked at (a failed reload is not retried until
    /// they change again, so a broken file is reported once).
    seen: Mutex<Fingerprint>,
}

impl TlsState {
    /// Reads the files once; an error stops the broker's start.
    pub fn load(settings: TlsSettings) -> Result<Self, String> {
        let seen = fingerprint(&settings);
        let configs = settings.build()?;
        Ok(Self {
            settings,
            current: RwLock::new(configs),
            seen: Mutex::new(seen),
        })
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.current.read().server.clone()
    }

    pub fn client_config(&self) -> Option<Arc<ClientConfig>> {
        self.current.read().client.clone()
    }

    /// See [`TlsConfigs::controller_server`].
    pub fn controller_server_config(&self) -> Option<Arc<ServerConfig>> {
        self.current.read().controller_server.clone()
    }

    /// See [`TlsConfigs::controller_client`].
    pub fn controller_client_config(&self) -> Option<Arc<ClientConfig>> {
        self.current.read().controller_client.clone()
    }

    /// Rebuilds the configurations if a file changed since last time.
    pub fn reload_if_changed(&self) -> Reload {
        let now = fingerprint(&self.settings);
        {
            let mut seen = self.seen.lock();
            if *seen == now {
                return Reload::Unchanged;
            }
            *seen = now;
        }
        match self.settings.build() {
            Ok(configs) => {
                *self.current.write() = configs;
                Reload::Reloaded
            }
            Err(e) => Reload::Failed(e),
        }
    }
}

fn fingerprint(settings: &TlsSettings) -> Fingerprint {
    settings
        .files()
        .iter()
        .map(|p| {
            std::fs::metadata(p)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len())))
        })
        .collect()
}

/// `ssl.principal.mapping.rules`: Kafka's `RULE:pattern/replacement/[LU]`
/// and `DEFAULT`, comma separated, tried in order on a client
/// certificate's subject (RFC 2253); the first whose pattern matches the
/// whole subject gives the user name.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    source: String,
    rules: Vec<MappingRule>,
}

impl PartialEq for PrincipalMapper {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for PrincipalMapper {}

impl Default for PrincipalMapper {
    fn default() -> Self {
        Self {
            source: "DEFAULT".into(),
            rules: vec![MappingRule::Default],
        }
    }
}

#[derive(Debug, Clone)]
enum MappingRule {
    Default,
    Rule {
        /// The pattern anchored at both ends (Java's `Matcher.matches`).
        whole: Regex,
        pattern: Regex,
        /// In the regex crate's replacement syntax.
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Reads up to the next unescaped `/`; a backslash keeps the character
/// after it (both are returned).
fn until_slash(s: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '/' => return Some((&s[..i], &s[i + 1..])),
            _ => {}
        }
    }
    None
}

/// Java's replacement (`$1` a group, `\x` a literal x) in the regex
/// crate's syntax (`${1}`, `$$`).
fn replacement(java: &str) -> String {
    let mut out = String::new();
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(x) => out.push(x),
                None => {}
            },
            '$' if chars.peek().is_some_and(|d| d.is_ascii_digit()) => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                out.push_str(&format!("${{{digits}}}"));
            }
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out
}

impl PrincipalMapper {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut rules = Vec::new();
        let mut rest = text.trim_start();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(MappingRule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after)
                    .ok_or_else(|| format!("{rest:?}: RULE:pattern/replacement/ expected"))?;
                let (repl, mut after) = until_slash(after)
                    .ok_or_else(|| format!("{rest:?}: RULE:pattern/replacement/ expected"))?;
                let case = if let Some(a) = after.strip_prefix('L') {
                    after = a;
                    Case::Lower
                } else if let Some(a) = after.strip_prefix('U') {
                    after = a;
                    Case::Upper
                } else {
                    Case::Keep
                };
                let compile = |p: &str| {
                    Regex::new(p).map_err(|e| format!("pattern {pattern:?} is not a regex: {e}"))
                };
                rules.push(MappingRule::Rule {
                    whole: compile(&format!("^(?:{pattern})$"))?,
                    pattern: compile(pattern)?,
                    replacement: replacement(repl),
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "{rest:?}: a rule is DEFAULT or RULE:pattern/replacement/[LU]"
                ));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("{rest:?}: rules are separated by commas")),
            }
        }
        if rules.is_empty() {
            rules.push(MappingRule::Default);
        }
        Ok(Self {
            source: text.trim().to_string(),
            rules,
        })
    }

    /// The user name for `dn`, or `None` when no rule applies (Kafka then
    /// fails the authentication).
    pub fn map(&self, dn: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            MappingRule::Default => Some(dn.to_string()),
            MappingRule::Rule {
                whole,
                pattern,
                replacement,
                case,
            } => {
                if !whole.is_match(dn) {
                    return None;
                }
                let name = pattern.replace_all(dn, replacement.as_str()).into_owned();
                Some(match case {
                    Case::Keep => name,
                    Case::Lower => name.to_lowercase(),
                    Case::Upper => name.to_uppercase(),
                })
            }
        })
    }
}

/// The subject of a DER certificate in RFC 2253 form, as Java's
/// `X500Principal.getName()` writes it (Kafka's mTLS principal): the
/// most specific name first, no spaces, short names for the usual
/// attributes and `OID=#hex` for the rest.
pub fn subject_dn(cert: &[u8]) -> Result<String, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| format!("the client certificate does not parse: {e}"))?;
    let rdns: Vec<String> = cert
        .subject()
        .iter()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

fn attribute(a: &x509_parser::x509::AttributeTypeAndValue<'_>) -> String {
    let oid = a.attr_type().to_id_string();
    let short = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.9" => Some("STREET"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        _ => None,
    };
    match (short, a.as_str()) {
        (Some(name), Ok(value)) => format!("{name}={}", escape_value(value)),
        _ => {
            // RFC 2253 §2.4: the value's BER encoding in hex
            let value = a.attr_value();
            let header = &value.header;
            let mut der = vec![
                (header.class() as u8) << 6
                    | u8::from(header.is_constructed()) << 5
                    | (header.tag().0 as u8 & 0x1f),
            ];
            let len = value.data.len();
            if len < 0x80 {
                der.push(len as u8);
            } else {
                let bytes: Vec<u8> = len
                    .to_be_bytes()
                    .into_iter()
                    .skip_while(|b| *b == 0)
                    .collect();
                der.push(0x80 | bytes.len() as u8);
                der.extend(bytes);
            }
            der.extend_from_slice(value.data);
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{oid}=#{hex}")
        }
    }
}

/// RFC 2253 §2.4's escaping of an attribute value.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn settings(pairs: &[(&str, &str)]) -> Result<TlsSettings, String> {
        let props: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        tls_settings(|k| props.get(k).map(String::as_str))
    }

    #[test]
    fn default_rule_keeps_the_dn_and_rules_map_it() {
        let m = PrincipalMapper::parse("DEFAULT").unwrap();
        assert_eq!(
            m.map("CN=alice,OU=eng,O=acme").as_deref(),
            Some("CN=alice,OU=eng,O=acme")
        );
        // Kafka's documented example
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L, DEFAULT",
        )
        .unwrap();
        assert_eq!(
            m.map("CN=kafka-client,OU=ServiceUsers,O=Unknown")
                .as_deref(),
            Some("kafka-client")
        );
        assert_eq!(
            m.map("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US")
                .as_deref(),
            Some("duke@javasoft")
        );
        assert_eq!(m.map("OU=x,CN=Bob.Smith,O=y").as_deref(), Some("bob.smith"));
        assert_eq!(
            m.map("O=nobody").as_deref(),
            Some("O=nobody"),
            "DEFAULT last"
        );
    }

    #[test]
    fn without_a_matching_rule_there_is_no_principal() {
        let m = PrincipalMapper::parse("RULE:^CN=([^,]*),O=acme$/$1/U").unwrap();
        assert_eq!(m.map("CN=alice,O=acme").as_deref(), Some("ALICE"));
        assert_eq!(m.map("CN=alice,O=other"), None);
        // a partial match is not a match (Java's Matcher.matches)
        let m = PrincipalMapper::parse("RULE:CN=([^,]*)/$1/").unwrap();
        assert_eq!(m.map("CN=alice,O=acme"), None);
        assert_eq!(m.map("CN=alice").as_deref(), Some("alice"));
    }

    #[test]
    fn rules_may_hold_commas_and_escaped_slashes() {
        let m = PrincipalMapper::parse("RULE:^CN=([^,]*),OU=a\\/b$/user-$1\\/x/").unwrap();
        assert_eq!(m.map("CN=carol,OU=a/b").as_deref(), Some("user-carol/x"));
        // $1 followed by a letter is group 1, then the letter (Java)
        let m = PrincipalMapper::parse("RULE:^CN=(.*)$/$1s/").unwrap();
        assert_eq!(m.map("CN=dave").as_deref(), Some("daves"));
        assert_eq!(
            PrincipalMapper::parse("").unwrap().map("CN=x").as_deref(),
            Some("CN=x")
        );
        for bad in [
            "RULE:abc",
            "RULE:a/b",
            "NOPE",
            "DEFAULT DEFAULT",
            "RULE:(/x/",
        ] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dn_values_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape_value("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape_value("#x "), "\\#x\\ ");
        assert_eq!(escape_value("plain"), "plain");
    }

    #[test]
    fn settings_come_from_kafka_s_configs() {
        let s = settings(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/etc/tls/broker.pem"),
            ("ssl.truststore.location", "/etc/tls/ca.pem"),
            ("ssl.client.auth", "required"),
            ("ssl.enabled.protocols", "TLSv1.3"),
            ("ssl.principal.mapping.rules", "RULE:^CN=(.*)$/$1/L"),
        ])
        .unwrap();
        assert_eq!(s.keystore, KeyStore::File("/etc/tls/broker.pem".into()));
        assert_eq!(
            s.truststore,
            Some(PemSource::File("/etc/tls/ca.pem".into()))
        );
        assert_eq!(s.client_auth, ClientAuth::Required);
        assert_eq!(s.versions, vec![TlsVersion::V1_3]);
        assert!(s.endpoint_identification);
        assert_eq!(s.files().len(), 2);
        let s = settings(&[
            (
                "ssl.keystore.certificate.chain",
                "-----BEGIN CERTIFICATE-----",
            ),
            ("ssl.keystore.key", "-----BEGIN PRIVATE KEY-----"),
            ("ssl.protocol", "TLSv1.2"),
            ("ssl.endpoint.identification.algorithm", ""),
        ])
        .unwrap();
        assert!(matches!(s.keystore, KeyStore::Inline { .. }));
        assert_eq!(s.truststore, None);
        assert_eq!(s.client_auth, ClientAuth::None);
        assert_eq!(s.versions, vec![TlsVersion::V1_2]);
        assert!(!s.endpoint_identification);
        assert!(s.files().is_empty());
    }

    #[test]
    fn what_cannot_be_served_is_refused_with_a_reason() {
        let key = ("ssl.keystore.location", "/k.pem");
        for (pairs, why) in [
            (vec![], "needs its key"),
            (vec![key, ("ssl.keystore.type", "JKS")], "PEM stores only"),
            (vec![key, ("ssl.key.password", "x")], "unencrypted"),
            (vec![key, ("ssl.client.auth", "required")], "truststore"),
            (
                vec![key, ("ssl.client.auth", "maybe")],
                "required, requested, none",
            ),
            (
                vec![key, ("ssl.enabled.protocols", "TLSv1.1")],
                "not served",
            ),
            (
                vec![key, ("ssl.principal.mapping.rules", "RULE:x")],
                "mapping",
            ),
            (vec![("ssl.keystore.key", "k")], "either"),
        ] {
            let err = settings(&pairs).unwrap_err();
            assert!(err.contains(why), "{pairs:?}: {err}");
        }
    }

    /// A self-signed certificate with subject `dn` (DER order) and its
    /// key, as PEM.
    fn certificate(dn: &[(rcgen::DnType, &str)]) -> (String, String, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in dn {
            params.distinguished_name.push(t.clone(), *v);
        }
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }

    #[test]
    fn a_subject_reads_most_specific_first_as_java_writes_it() {
        use rcgen::DnType;
        let (_, _, der) = certificate(&[
            (DnType::CountryName, "DE"),
            (DnType::OrganizationName, "acme, inc."),
            (DnType::OrganizationalUnitName, "eng"),
            (DnType::CommonName, "alice"),
        ]);
        assert_eq!(
            subject_dn(&der).unwrap(),
            "CN=alice,OU=eng,O=acme\\, inc.,C=DE"
        );
        assert!(subject_dn(b"not a certificate").is_err());
    }

    #[test]
    fn inline_pem_builds_and_a_mismatched_or_encrypted_key_is_refused() {
        let (cert, key, _) = certificate(&[(rcgen::DnType::CommonName, "broker")]);
        let inline = |chain: &str, key: &str| TlsSettings {
            keystore: KeyStore::Inline {
                chain: chain.to_string(),
                key: key.to_string(),
            },
            truststore: Some(PemSource::Inline(cert.clone())),
            client_auth: ClientAuth::Required,
            versions: vec![TlsVersion::V1_2, TlsVersion::V1_3],
            endpoint_identification: true,
            principal_mapper: PrincipalMapper::default(),
            reload_interval_ms: DEFAULT_RELOAD_INTERVAL_MS,
        };
        let built = inline(&cert, &key).build().unwrap();
        assert!(built.client.is_some(), "a truststore lets brokers dial");
        let (_, other_key, _) = certificate(&[(rcgen::DnType::CommonName, "other")]);
        let err = inline(&cert, &other_key).build().unwrap_err();
        assert!(err.contains("do not go together"), "{err}");
        let encrypted =
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let err = inline(&cert, encrypted).build().unwrap_err();
        assert!(err.contains("encrypted"), "{err}");
        let mut no_trust = inline(&cert, &key);
        no_trust.truststore = None;
        no_trust.client_auth = ClientAuth::None;
        assert!(no_trust.build().unwrap().client.is_none());
    }
}
