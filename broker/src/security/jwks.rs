//! The keys OAUTHBEARER tokens are checked against (KIP-768): a JSON Web
//! Key Set read from `sasl.oauthbearer.jwks.endpoint.url` — a file, or an
//! HTTP(S) endpoint of the identity provider — cached, and refreshed every
//! `sasl.oauthbearer.jwks.endpoint.refresh.ms`, early when a token names
//! a key id the cache lacks (key rotation at the provider), with Kafka's
//! exponential retry backoff (`.retry.backoff.ms` doubling up to
//! `.retry.backoff.max.ms`) while the source fails; the keys last fetched
//! stay in use meanwhile.
//!
//! This module owns the cache, the fetch (hyper with rustls, trusting the
//! system's roots; `SSL_CERT_FILE` / `SSL_CERT_DIR` name others) and the
//! signature check (`jsonwebtoken`, asymmetric algorithms only: RS*, PS*,
//! ES*, EdDSA; `none` and the HMAC family are refused, so a public key
//! can never be used as an HMAC secret). The claim rules are
//! [`super::oauthbearer::check_claims`]'s.
//!
//! A file source is read when the listener starts (a missing or bad file
//! refuses the start, as Kafka's) and again on refresh; an HTTP source is
//! fetched in the background from the start, and tokens are refused
//! (`invalid_token`) until the first fetch succeeds.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::RwLock;

use super::oauthbearer::{check_claims, ClaimRules, JwksUrl, OAuthSettings, Refusal, ValidToken};

/// The largest JWKS accepted (a provider's set is a few KiB).
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// How long one HTTP fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Parses a JWKS document.
pub fn parse_jwks(bytes: &[u8]) -> Result<JwkSet, String> {
    if bytes.len() > MAX_JWKS_BYTES {
        return Err(format!("the JWKS is larger than {MAX_JWKS_BYTES} bytes"));
    }
    let set: JwkSet =
        serde_json::from_slice(bytes).map_err(|e| format!("the JWKS does not parse: {e}"))?;
    if set.keys.is_empty() {
        return Err("the JWKS holds no keys".into());
    }
    Ok(set)
}

/// Reads a JWKS file (blocking).
pub fn read_file(path: &std::path::Path) -> Result<JwkSet, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_jwks(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Fetches a JWKS over HTTP(S).
pub async fn fetch(url: &str) -> Result<JwkSet, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    let client: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let get = async {
        let response = client.get(uri).await.map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        let body = http_body_util::Limited::new(response.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map_err(|e| format!("{url}: {e}"))?
            .to_bytes();
        parse_jwks(&body).map_err(|e| format!("{url}: {e}"))
    };
    tokio::time::timeout(FETCH_TIMEOUT, get)
        .await
        .map_err(|_| format!("{url}: no answer within {FETCH_TIMEOUT:?}"))?
}

/// Loads a JWKS from its source.
pub async fn load(url: &JwksUrl) -> Result<JwkSet, String> {
    match url {
        JwksUrl::File(path) => {
            let path = path.clone();
            tokio::task::spawn_blocking(move || read_file(&path))
                .await
                .map_err(|e| e.to_string())?
        }
        JwksUrl::Http(url) => fetch(url).await,
    }
}

/// The asymmetric algorithms accepted.
fn accepted(alg: Algorithm) -> bool {
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// The keys of one listener, shared by its connections and its refresher.
#[derive(Debug)]
pub struct KeyCache {
    keys: RwLock<Option<Arc<JwkSet>>>,
    /// Woken when a token names a key the cache lacks.
    wanted: tokio::sync::Notify,
}

impl Default for KeyCache {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyCache {
    pub fn new() -> Self {
        Self {
            keys: RwLock::new(None),
            wanted: tokio::sync::Notify::new(),
        }
    }

    pub fn install(&self, keys: JwkSet) {
        *self.keys.write() = Some(Arc::new(keys));
    }

    pub fn key_count(&self) -> usize {
        self.keys.read().as_ref().map_or(0, |k| k.keys.len())
    }

    /// The keys that may have signed a token with `kid` and `alg`.
    fn candidates(&self, kid: Option<&str>, alg: Algorithm) -> Vec<Jwk> {
        let Some(keys) = self.keys.read().clone() else {
            return Vec::new();
        };
        keys.keys
            .iter()
            .filter(|k| kid.is_none() || k.common.key_id.as_deref() == kid)
            .filter(|k| {
                k.common
                    .key_algorithm
                    .is_none_or(|a| format!("{a:?}") == format!("{alg:?}"))
            })
            .cloned()
            .collect()
    }

    /// Checks a token's signature against the cached keys, then its
    /// claims. A token whose key id is unknown wakes the refresher.
    pub fn validate(
        &self,
        token: &str,
        rules: &ClaimRules,
        now_ms: i64,
    ) -> Result<ValidToken, Refusal> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Refusal::invalid_token(format!("the token's header: {e}")))?;
        if !accepted(header.alg) {
            return Err(Refusal::invalid_token(format!(
                "algorithm {:?} is not accepted (asymmetric signatures only)",
                header.alg
            )));
        }
        if self.keys.read().is_none() {
            self.wanted.notify_one();
            return Err(Refusal::invalid_token("no JWKS has been loaded yet"));
        }
        let candidates = self.candidates(header.kid.as_deref(), header.alg);
        if candidates.is_empty() {
            self.wanted.notify_one();
            return Err(Refusal::invalid_token(format!(
                "no key of the JWKS matches kid {:?} and algorithm {:?}",
                header.kid, header.alg
            )));
        }
        let mut validation = Validation::new(header.alg);
        // the claims are checked by check_claims, with Kafka's rules
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let mut last = String::new();
        for jwk in candidates {
            let key = match DecodingKey::from_jwk(&jwk) {
                Ok(key) => key,
                Err(e) => {
                    last = format!("key {:?}: {e}", jwk.common.key_id);
                    continue;
                }
            };
            match jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation) {
                Ok(data) => return check_claims(&data.claims, rules, now_ms),
                Err(e) => last = format!("signature with key {:?}: {e}", jwk.common.key_id),
            }
        }
        Err(Refusal::invalid_token(last))
    }
}

/// Keeps `cache` fresh until `shutdown` says stop: a reload every
/// `refresh_ms`, early when a token wanted an unknown key (at most once
/// per `retry_backoff_ms`), and retries with a doubling backoff while the
/// source fails. Loads at once when the cache is empty.
pub async fn keep_fresh(
    cache: Arc<KeyCache>,
    url: JwksUrl,
    refresh_ms: u64,
    retry_backoff_ms: u64,
    retry_backoff_max_ms: u64,
    listener: String,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut wait = if cache.key_count() == 0 {
        Duration::ZERO
    } else {
        Duration::from_millis(refresh_ms)
    };
    let mut backoff = Duration::from_millis(retry_backoff_ms);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cache.wanted.notified() => {
                // rate-limited: a flood of unknown key ids is one reload
                tokio::time::sleep(Duration::from_millis(retry_backoff_ms)).await;
            }
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
        }
        match load(&url).await {
            Ok(keys) => {
                let count = keys.keys.len();
                cache.install(keys);
                tracing::debug!(listener = %listener, keys = count, "OAUTHBEARER JWKS loaded");
                backoff = Duration::from_millis(retry_backoff_ms);
                wait = Duration::from_millis(refresh_ms);
            }
            Err(e) => {
                tracing::warn!(listener = %listener, error = %e, retry_in = ?backoff, "could not load the OAUTHBEARER JWKS; the keys loaded before stay in use");
                wait = backoff;
                backoff = (backoff * 2).min(Duration::from_millis(retry_backoff_max_ms));
            }
        }
    }
}

/// A listener's OAUTHBEARER settings and the JWKS cache its connections
/// share (equal when the settings are: the cache is runtime state).
#[derive(Debug, Clone)]
pub struct OAuthListener {
    pub settings: OAuthSettings,
    pub keys: Arc<KeyCache>,
}

impl PartialEq for OAuthListener {
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

impl Eq for OAuthListener {}

/// Starts a listener's key cache: a file source is read now (an error
/// refuses the start), then `keep_fresh` runs until `shutdown`. `None`
/// for a listener without JWKS-checked OAUTHBEARER.
pub fn start(
    listener: &str,
    oauth: Option<&OAuthListener>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<()>>, String> {
    let Some(oauth) = oauth else {
        return Ok(None);
    };
    let super::oauthbearer::Validator::Jwks {
        url,
        refresh_ms,
        retry_backoff_ms,
        retry_backoff_max_ms,
    } = &oauth.settings.validator
    else {
        tracing::warn!(listener = %listener, "OAUTHBEARER takes unsecured (unsigned) tokens, Kafka's default: for development only; set listener.name.<l>.oauthbearer.sasl.server.callback.handler.class and sasl.oauthbearer.jwks.endpoint.url to check signatures");
        return Ok(None);
    };
    if let JwksUrl::File(path) = url {
        oauth.keys.install(read_file(path)?);
    }
    Ok(Some(tokio::spawn(keep_fresh(
        oauth.keys.clone(),
        url.clone(),
        *refresh_ms,
        *retry_backoff_ms,
        *retry_backoff_max_ms,
        listener.to_string(),
        shutdown,
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwks_documents_are_bounded_and_must_hold_keys() {
        assert!(parse_jwks(br#"{"keys":[]}"#).is_err());
        assert!(parse_jwks(b"not json").is_err());
        assert!(parse_jwks(&vec![b' '; MAX_JWKS_BYTES + 1]).is_err());
        let one = br#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#;
        let set = parse_jwks(one).unwrap();
        assert_eq!(set.keys.len(), 1);
    }

    #[test]
    fn hmac_and_unloaded_keys_are_refused() {
        let cache = KeyCache::new();
        let rules = ClaimRules::default();
        // {"alg":"HS256","typ":"JWT"}.{"sub":"x"}.sig
        let hs = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ4In0.c2ln";
        let r = cache.validate(hs, &rules, 0).unwrap_err();
        assert!(r.reason.contains("HS256"), "{r:?}");
        // {"alg":"ES256"} with no keys loaded
        let es = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln";
        let r = cache.validate(es, &rules, 0).unwrap_err();
        assert!(r.reason.contains("no JWKS"), "{r:?}");
        assert!(cache.validate("garbage", &rules, 0).is_err());
    }
}
