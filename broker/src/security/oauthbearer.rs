//! The server side of SASL OAUTHBEARER (RFC 7628; Kafka's KIP-255 and
//! KIP-768) as Kafka serves it, as pure functions: the client's one
//! message, the checks of a token's claims, and the settings a listener
//! reads from Kafka's configs. Signatures are checked by [`super::jwks`].
//!
//! Two validators, chosen as Kafka chooses its server callback handler
//! (`listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`):
//! - `org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler`:
//!   signed JWTs checked against the keys of `sasl.oauthbearer.jwks.endpoint.url`
//!   (a `file:`, `http:` or `https:` URL), with Kafka 4.4's broker rules:
//!   `exp`, `iat`, the subject claim (`sasl.oauthbearer.sub.claim.name`)
//!   required; `sasl.oauthbearer.expected.audience` and
//!   `.expected.issuer` required unless `sasl.oauthbearer.allow.unverified.audience`
//!   / `.issuer` say otherwise; `sasl.oauthbearer.clock.skew.seconds`;
//! - unset: Kafka's default, the *unsecured* validator
//!   (`OAuthBearerUnsecuredValidatorCallbackHandler`): unsigned tokens
//!   (`alg: none`), for development only, with the options of the
//!   listener's JAAS config (`unsecuredValidatorPrincipalClaimName`,
//!   `unsecuredValidatorScopeClaimName`, `unsecuredValidatorRequiredScope`,
//!   `unsecuredValidatorAllowableClockSkewMs`). The broker warns at start.
//!
//! Any other handler class is refused at start: Moldau loads no Java.
//!
//! A token that fails validation is answered as Kafka answers it: a
//! challenge `{"status":"invalid_token"}` (or `insufficient_scope` with
//! the scope), the client's `%x01` acknowledgement, then
//! SASL_AUTHENTICATION_FAILED with that JSON as the message. Why the
//! token failed is logged at the broker only, never told to the client.

use std::collections::BTreeMap;

use base64::Engine;

/// The SASL mechanism name.
pub const MECHANISM: &str = "OAUTHBEARER";

/// Kafka's validating server callback handler (JWKS-checked tokens).
pub const VALIDATOR_CALLBACK_HANDLER: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler";

/// Kafka's unsecured server callback handler (its default).
pub const UNSECURED_VALIDATOR_CALLBACK_HANDLER: &str =
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler";

/// The longest client message accepted (Kafka bounds it by
/// `sasl.server.max.receive.size`, 512 KiB; a JWT is a few KiB).
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;

/// Kafka's text for a client first message that does not parse.
pub const INVALID_FIRST_MESSAGE: &str = "Invalid OAUTHBEARER client first message";

/// The client's one message: `n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A]*^A`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialResponse {
    /// Empty when the client named none.
    pub authzid: String,
    pub token: String,
    /// SASL extensions (Kafka accepts any that are well formed).
    pub extensions: BTreeMap<String, String>,
}

const SEPARATOR: char = '\u{1}';

fn is_saslname(s: &str) -> bool {
    // `(?:[\x01-\x7F&&[^=,]]|=2C|=3D)+`
    if s.is_empty() {
        return false;
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'=' if bytes[i..].starts_with(b"=2C") || bytes[i..].starts_with(b"=3D") => i += 3,
            b'=' | b',' => return false,
            0x01..=0x7F => i += 1,
            _ => return false,
        }
    }
    true
}

fn is_key(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic())
}

fn is_value(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| (0x21..=0x7E).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// Parses the client's first (and only) message with Kafka's grammar.
pub fn parse_initial_response(message: &[u8]) -> Result<InitialResponse, String> {
    if message.len() > MAX_MESSAGE_LEN {
        return Err(format!(
            "{INVALID_FIRST_MESSAGE}: longer than {MAX_MESSAGE_LEN} bytes"
        ));
    }
    let text = std::str::from_utf8(message).map_err(|_| INVALID_FIRST_MESSAGE.to_string())?;
    let rest = text
        .strip_prefix("n,")
        .ok_or_else(|| INVALID_FIRST_MESSAGE.to_string())?;
    let (gs2_authzid, rest) = rest
        .split_once(',')
        .ok_or_else(|| INVALID_FIRST_MESSAGE.to_string())?;
    let authzid = match gs2_authzid {
        "" => String::new(),
        a => match a.strip_prefix("a=") {
            Some(name) if is_saslname(name) => name.to_string(),
            _ => return Err(INVALID_FIRST_MESSAGE.into()),
        },
    };
    // ^A kvpairs ^A, each pair ending in ^A
    let body = rest
        .strip_prefix(SEPARATOR)
        .and_then(|b| b.strip_suffix(SEPARATOR))
        .ok_or_else(|| INVALID_FIRST_MESSAGE.to_string())?;
    let mut pairs: BTreeMap<String, String> = BTreeMap::new();
    if !body.is_empty() {
        let body = body
            .strip_suffix(SEPARATOR)
            .ok_or_else(|| INVALID_FIRST_MESSAGE.to_string())?;
        for pair in body.split(SEPARATOR) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| INVALID_FIRST_MESSAGE.to_string())?;
            if !is_key(k) || !is_value(v) {
                return Err(INVALID_FIRST_MESSAGE.into());
            }
            pairs.insert(k.to_string(), v.to_string());
        }
    }
    let auth = pairs
        .remove("auth")
        .ok_or_else(|| format!("{INVALID_FIRST_MESSAGE}: 'auth' not specified"))?;
    let (scheme, token) = auth
        .split_once(' ')
        .map(|(s, t)| (s, t.trim_start_matches(' ')))
        .filter(|(s, t)| {
            !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !t.is_empty()
                && t.bytes().all(is_token_char)
        })
        .ok_or_else(|| format!("{INVALID_FIRST_MESSAGE}: invalid 'auth' format"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(format!(
            "Invalid scheme in OAUTHBEARER client first message: {scheme}"
        ));
    }
    Ok(InitialResponse {
        authzid,
        token: token.to_string(),
        extensions: pairs,
    })
}

/// The client's acknowledgement of an error challenge.
pub fn is_error_acknowledgement(message: &[u8]) -> bool {
    message == [0x01]
}

/// Why a token was refused: the status the client is told (RFC 7628's
/// error JSON), and the reason the broker logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: &'static str,
    pub scope: Option<String>,
    pub reason: String,
}

impl Refusal {
    pub fn invalid_token(reason: impl Into<String>) -> Self {
        Self {
            status: "invalid_token",
            scope: None,
            reason: reason.into(),
        }
    }

    /// The challenge JSON, as Kafka writes it.
    pub fn challenge(&self) -> String {
        match &self.scope {
            None => format!("{{\"status\":\"{}\"}}", self.status),
            Some(scope) => format!(
                "{{\"status\":\"{}\", \"scope\":\"{}\"}}",
                self.status,
                scope.replace('\\', "\\\\").replace('"', "\\\"")
            ),
        }
    }
}

/// A valid token: who it names and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    pub principal: String,
    pub expires_at_ms: i64,
    pub scopes: Vec<String>,
}

/// The claim checks of one validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRules {
    pub subject_claim: String,
    pub scope_claim: String,
    /// Empty: the audience is not checked.
    pub expected_audience: Vec<String>,
    pub expected_issuer: Option<String>,
    pub clock_skew_ms: i64,
    /// `iat` must be present (the JWKS validator's rule).
    pub require_issued_at: bool,
    /// Scopes the token must carry (the unsecured validator's
    /// `unsecuredValidatorRequiredScope`).
    pub required_scopes: Vec<String>,
}

impl Default for ClaimRules {
    /// Kafka's unsecured validator's defaults: the principal in `sub`,
    /// scopes in `scope`, nothing else required.
    fn default() -> Self {
        Self {
            subject_claim: "sub".into(),
            scope_claim: "scope".into(),
            expected_audience: Vec::new(),
            expected_issuer: None,
            clock_skew_ms: 0,
            require_issued_at: false,
            required_scopes: Vec::new(),
        }
    }
}

/// A NumericDate claim in milliseconds (seconds, possibly fractional).
fn numeric_date_ms(claims: &serde_json::Value, name: &str) -> Result<Option<i64>, Refusal> {
    match claims.get(name) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|s| s.is_finite())
            .map(|s| Some((s * 1000.0) as i64))
            .ok_or_else(|| Refusal::invalid_token(format!("the '{name}' claim is not a number"))),
    }
}

/// Checks a token's claims (its signature already checked, or not signed
/// for the unsecured validator) at `now_ms`.
pub fn check_claims(
    claims: &serde_json::Value,
    rules: &ClaimRules,
    now_ms: i64,
) -> Result<ValidToken, Refusal> {
    if !claims.is_object() {
        return Err(Refusal::invalid_token("the payload is not a JSON object"));
    }
    let expires_at_ms =
        numeric_date_ms(claims, "exp")?.ok_or_else(|| Refusal::invalid_token("no 'exp' claim"))?;
    if expires_at_ms + rules.clock_skew_ms <= now_ms {
        return Err(Refusal::invalid_token(format!(
            "the token expired at {expires_at_ms} (now {now_ms})"
        )));
    }
    let issued_at = numeric_date_ms(claims, "iat")?;
    match issued_at {
        None if rules.require_issued_at => {
            return Err(Refusal::invalid_token("no 'iat' claim"));
        }
        Some(iat) if iat > expires_at_ms => {
            return Err(Refusal::invalid_token("'iat' is after 'exp'"));
        }
        Some(iat) if iat > now_ms + rules.clock_skew_ms => {
            return Err(Refusal::invalid_token("'iat' is in the future"));
        }
        _ => {}
    }
    if let Some(nbf) = numeric_date_ms(claims, "nbf")? {
        if nbf > now_ms + rules.clock_skew_ms {
            return Err(Refusal::invalid_token("'nbf' is in the future"));
        }
    }
    let principal = claims
        .get(&rules.subject_claim)
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Refusal::invalid_token(format!(
                "no '{}' claim naming the principal",
                rules.subject_claim
            ))
        })?
        .to_string();
    if !rules.expected_audience.is_empty() {
        let audience: Vec<&str> = match claims.get("aud") {
            Some(serde_json::Value::String(a)) => vec![a.as_str()],
            Some(serde_json::Value::Array(all)) => all.iter().filter_map(|a| a.as_str()).collect(),
            _ => Vec::new(),
        };
        if !audience
            .iter()
            .any(|a| rules.expected_audience.iter().any(|e| e == a))
        {
            return Err(Refusal::invalid_token(format!(
                "audience {audience:?} is not one of {:?}",
                rules.expected_audience
            )));
        }
    }
    if let Some(issuer) = &rules.expected_issuer {
        if claims.get("iss").and_then(|v| v.as_str()) != Some(issuer.as_str()) {
            return Err(Refusal::invalid_token(format!(
                "issuer {:?} is not {issuer:?}",
                claims.get("iss")
            )));
        }
    }
    let scopes: Vec<String> = match claims.get(&rules.scope_claim) {
        Some(serde_json::Value::String(s)) => s
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        Some(serde_json::Value::Array(all)) => all
            .iter()
            .filter_map(|s| s.as_str())
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    };
    let missing: Vec<&String> = rules
        .required_scopes
        .iter()
        .filter(|r| !scopes.contains(r))
        .collect();
    if !missing.is_empty() {
        return Err(Refusal {
            status: "insufficient_scope",
            scope: Some(rules.required_scopes.join(" ")),
            reason: format!("the token lacks the scopes {missing:?}"),
        });
    }
    Ok(ValidToken {
        principal,
        expires_at_ms,
        scopes,
    })
}

/// The parts of a compact JWS: header and payload decoded as JSON, and
/// whether it carries a signature.
pub struct CompactJws {
    pub header: serde_json::Value,
    pub claims: serde_json::Value,
    pub signed: bool,
}

/// Splits and decodes `header.payload.signature` (base64url, no padding).
pub fn decode_compact(token: &str) -> Result<CompactJws, Refusal> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, payload, signature] = parts[..] else {
        return Err(Refusal::invalid_token("not a compact JWS of three parts"));
    };
    let decode = |part: &str, what: &str| -> Result<serde_json::Value, Refusal> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| Refusal::invalid_token(format!("the {what} is not base64url")))?;
        serde_json::from_slice(&bytes)
            .map_err(|_| Refusal::invalid_token(format!("the {what} is not JSON")))
    };
    Ok(CompactJws {
        header: decode(header, "header")?,
        claims: decode(payload, "payload")?,
        signed: !signature.is_empty(),
    })
}

/// Kafka's unsecured validator: an unsigned token (`alg: none`) whose
/// claims pass `rules`.
pub fn validate_unsecured(
    token: &str,
    rules: &ClaimRules,
    now_ms: i64,
) -> Result<ValidToken, Refusal> {
    let jws = decode_compact(token)?;
    if jws.header.get("alg").and_then(|a| a.as_str()) != Some("none") || jws.signed {
        return Err(Refusal::invalid_token(
            "the unsecured validator takes only unsigned tokens (alg none)",
        ));
    }
    check_claims(&jws.claims, rules, now_ms)
}

/// Where a JWKS comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksUrl {
    File(std::path::PathBuf),
    Http(String),
}

impl JwksUrl {
    pub fn parse(url: &str) -> Result<Self, String> {
        let url = url.trim();
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(format!(
                    "sasl.oauthbearer.jwks.endpoint.url {url:?}: a file URL needs an absolute path"
                ));
            }
            return Ok(JwksUrl::File(path.into()));
        }
        if let Some(path) = url.strip_prefix("file:") {
            if path.starts_with('/') {
                return Ok(JwksUrl::File(path.into()));
            }
        }
        if url.starts_with("http://") || url.starts_with("https://") {
            return url
                .parse::<hyper::Uri>()
                .map(|_| JwksUrl::Http(url.to_string()))
                .map_err(|e| format!("sasl.oauthbearer.jwks.endpoint.url {url:?}: {e}"));
        }
        Err(format!(
            "sasl.oauthbearer.jwks.endpoint.url {url:?}: expected a file:, http: or https: URL"
        ))
    }
}

/// How a listener validates OAUTHBEARER tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validator {
    Unsecured,
    Jwks {
        url: JwksUrl,
        /// `sasl.oauthbearer.jwks.endpoint.refresh.ms`
        refresh_ms: u64,
        /// `sasl.oauthbearer.jwks.endpoint.retry.backoff.ms` and `.max.ms`
        retry_backoff_ms: u64,
        retry_backoff_max_ms: u64,
    },
}

/// A listener's OAUTHBEARER settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    pub validator: Validator,
    pub rules: ClaimRules,
}

/// Reads a listener's OAUTHBEARER settings; `config` looks a key up with
/// the listener's prefixes (`listener.name.<l>.oauthbearer.<key>`, then
/// `listener.name.<l>.<key>`, then `<key>`), `jaas` is the listener's
/// OAUTHBEARER JAAS config if any.
pub fn settings(
    config: impl Fn(&str) -> Option<String>,
    jaas: Option<&str>,
) -> Result<OAuthSettings, String> {
    let long = |key: &str, default: i64| -> Result<i64, String> {
        config(key).map_or(Ok(default), |v| {
            v.trim()
                .parse()
                .map_err(|_| format!("{key}: {v:?} is not a number"))
        })
    };
    let boolean = |key: &str| -> Result<bool, String> {
        match config(key).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(false),
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" => Ok(false),
            Some(v) => Err(format!("{key}: {v:?} is not true or false")),
        }
    };
    let options = match jaas {
        Some(text) => super::jaas::parse(text)?.options,
        None => BTreeMap::new(),
    };
    let handler = config("sasl.server.callback.handler.class");
    match handler.as_deref().map(str::trim) {
        None | Some("") | Some(UNSECURED_VALIDATOR_CALLBACK_HANDLER) => {
            let option = |k: &str| options.get(k).map(|v| v.trim().to_string());
            let skew = match option("unsecuredValidatorAllowableClockSkewMs") {
                None => 0,
                Some(v) => v.parse::<i64>().ok().filter(|s| *s >= 0).ok_or_else(|| {
                    format!("unsecuredValidatorAllowableClockSkewMs: {v:?} is not a non-negative number")
                })?,
            };
            let defaults = ClaimRules::default();
            Ok(OAuthSettings {
                validator: Validator::Unsecured,
                rules: ClaimRules {
                    subject_claim: option("unsecuredValidatorPrincipalClaimName")
                        .unwrap_or(defaults.subject_claim),
                    scope_claim: option("unsecuredValidatorScopeClaimName")
                        .unwrap_or(defaults.scope_claim),
                    clock_skew_ms: skew,
                    required_scopes: option("unsecuredValidatorRequiredScope")
                        .map(|s| s.split(' ').filter(|s| !s.is_empty()).map(String::from).collect())
                        .unwrap_or_default(),
                    ..defaults
                },
            })
        }
        Some(VALIDATOR_CALLBACK_HANDLER) => {
            let url = config("sasl.oauthbearer.jwks.endpoint.url").ok_or_else(|| {
                "OAuthBearerValidatorCallbackHandler needs sasl.oauthbearer.jwks.endpoint.url".to_string()
            })?;
            let expected_audience: Vec<String> = config("sasl.oauthbearer.expected.audience")
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|a| !a.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            if expected_audience.is_empty() && !boolean("sasl.oauthbearer.allow.unverified.audience")? {
                return Err("sasl.oauthbearer.jwks.endpoint.url needs sasl.oauthbearer.expected.audience (or sasl.oauthbearer.allow.unverified.audience=true), as in Kafka 4.4".into());
            }
            let expected_issuer = config("sasl.oauthbearer.expected.issuer")
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty());
            if expected_issuer.is_none() && !boolean("sasl.oauthbearer.allow.unverified.issuer")? {
                return Err("sasl.oauthbearer.jwks.endpoint.url needs sasl.oauthbearer.expected.issuer (or sasl.oauthbearer.allow.unverified.issuer=true), as in Kafka 4.4".into());
            }
            let non_negative = |key: &str, default: i64| -> Result<u64, String> {
                u64::try_from(long(key, default)?).map_err(|_| format!("{key} must not be negative"))
            };
            Ok(OAuthSettings {
                validator: Validator::Jwks {
                    url: JwksUrl::parse(&url)?,
                    refresh_ms: non_negative("sasl.oauthbearer.jwks.endpoint.refresh.ms", 3_600_000)?.max(1_000),
                    retry_backoff_ms: non_negative("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", 100)?.max(1),
                    retry_backoff_max_ms: non_negative("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", 10_000)?.max(1),
                },
                rules: ClaimRules {
                    subject_claim: config("sasl.oauthbearer.sub.claim.name").unwrap_or_else(|| "sub".into()),
                    scope_claim: config("sasl.oauthbearer.scope.claim.name").unwrap_or_else(|| "scope".into()),
                    expected_audience,
                    expected_issuer,
                    clock_skew_ms: non_negative("sasl.oauthbearer.clock.skew.seconds", 30)? as i64 * 1000,
                    require_issued_at: true,
                    required_scopes: Vec::new(),
                },
            })
        }
        Some(other) => Err(format!(
            "OAUTHBEARER server callback handler {other} cannot run in Moldau (it loads no Java): use {VALIDATOR_CALLBACK_HANDLER} with sasl.oauthbearer.jwks.endpoint.url, or none for Kafka's unsecured default"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(s: &str) -> Vec<u8> {
        s.replace('|', "\u{1}").into_bytes()
    }

    #[test]
    fn the_client_message_parses_as_kafka_writes_it() {
        let r = parse_initial_response(&message("n,,|auth=Bearer abc.def.ghi||")).unwrap();
        assert_eq!(r.token, "abc.def.ghi");
        assert_eq!(r.authzid, "");
        assert!(r.extensions.is_empty());
        let r = parse_initial_response(&message(
            "n,a=alice,|auth=bearer   t-1_x.y|traceId=42|env=a b||",
        ))
        .unwrap();
        assert_eq!(r.authzid, "alice");
        assert_eq!(r.token, "t-1_x.y");
        assert_eq!(r.extensions["traceId"], "42");
        assert_eq!(r.extensions["env"], "a b");
    }

    #[test]
    fn malformed_client_messages_are_refused() {
        for bad in [
            "",
            "y,,|auth=Bearer t||",
            "n,,auth=Bearer t||",
            "n,,|auth=Bearer t|",
            "n,,|||",
            "n,,|traceId=1||",
            "n,,|auth=Bearer|",
            "n,,|auth=Bearer t!t||",
            "n,,|auth=Basic dXNlcg||",
            "n,a=al,ice,|auth=Bearer t||",
            "n,,|au th=Bearer t||",
            "n,,|k1=v|auth=Bearer t||",
        ] {
            assert!(parse_initial_response(&message(bad)).is_err(), "{bad:?}");
        }
        assert!(parse_initial_response(&[0xff, 0xfe]).is_err());
        let long = format!("n,,|auth=Bearer {}||", "a".repeat(MAX_MESSAGE_LEN));
        assert!(parse_initial_response(&message(&long)).is_err());
        assert!(is_error_acknowledgement(&[1]));
        assert!(!is_error_acknowledgement(&[1, 1]));
    }

    fn rules() -> ClaimRules {
        ClaimRules {
            subject_claim: "sub".into(),
            scope_claim: "scope".into(),
            expected_audience: vec!["kafka".into()],
            expected_issuer: Some("https://idp.example".into()),
            clock_skew_ms: 30_000,
            require_issued_at: true,
            required_scopes: vec![],
        }
    }

    #[test]
    fn claims_are_checked_as_kafkas_broker_validator_checks_them() {
        let now = 1_000_000_000_000i64;
        let ok = serde_json::json!({
            "sub": "alice", "exp": now / 1000 + 60, "iat": now / 1000 - 60,
            "aud": ["other", "kafka"], "iss": "https://idp.example", "scope": "read write"
        });
        let t = check_claims(&ok, &rules(), now).unwrap();
        assert_eq!(t.principal, "alice");
        assert_eq!(t.expires_at_ms, now + 60_000);
        assert_eq!(t.scopes, vec!["read", "write"]);

        let with = |k: &str, v: serde_json::Value| {
            let mut c = ok.clone();
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v;
            }
            c
        };
        for (claims, why) in [
            (with("exp", serde_json::Value::Null), "no exp"),
            (
                with("exp", serde_json::json!(now / 1000 - 31)),
                "expired beyond the skew",
            ),
            (with("exp", serde_json::json!("soon")), "exp not a number"),
            (with("iat", serde_json::Value::Null), "no iat"),
            (
                with("iat", serde_json::json!(now / 1000 + 120)),
                "iat in the future",
            ),
            (
                with("nbf", serde_json::json!(now / 1000 + 120)),
                "not yet valid",
            ),
            (with("sub", serde_json::Value::Null), "no subject"),
            (with("sub", serde_json::json!("  ")), "blank subject"),
            (with("aud", serde_json::json!("other")), "wrong audience"),
            (with("aud", serde_json::Value::Null), "no audience"),
            (
                with("iss", serde_json::json!("https://evil.example")),
                "wrong issuer",
            ),
        ] {
            let refusal = check_claims(&claims, &rules(), now).unwrap_err();
            assert_eq!(refusal.status, "invalid_token", "{why}");
            assert_eq!(refusal.challenge(), r#"{"status":"invalid_token"}"#);
        }
        // within the clock skew
        assert!(check_claims(
            &with("exp", serde_json::json!(now / 1000 - 29)),
            &rules(),
            now
        )
        .is_ok());
        // another subject claim
        let mut r = rules();
        r.subject_claim = "client_id".into();
        assert_eq!(
            check_claims(&with("client_id", serde_json::json!("svc")), &r, now)
                .unwrap()
                .principal,
            "svc"
        );
    }

    #[test]
    fn the_unsecured_validator_takes_only_unsigned_tokens_and_checks_scopes() {
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let now = 1_000_000_000_000i64;
        let claims = serde_json::json!({"sub": "bob", "exp": now / 1000 + 10, "scope": ["a", "b"]});
        let unsigned = format!(
            "{}.{}.",
            b64(serde_json::json!({"alg": "none"})),
            b64(claims.clone())
        );
        let mut r = rules();
        r.expected_audience.clear();
        r.expected_issuer = None;
        r.require_issued_at = false;
        assert_eq!(
            validate_unsecured(&unsigned, &r, now).unwrap().principal,
            "bob"
        );
        let signed = format!(
            "{}.{}.c2ln",
            b64(serde_json::json!({"alg": "HS256"})),
            b64(claims)
        );
        assert!(validate_unsecured(&signed, &r, now).is_err());
        assert!(validate_unsecured("a.b", &r, now).is_err());
        assert!(validate_unsecured("!!.??.", &r, now).is_err());
        r.required_scopes = vec!["a".into(), "c".into()];
        let refusal = validate_unsecured(&unsigned, &r, now).unwrap_err();
        assert_eq!(refusal.status, "insufficient_scope");
        assert_eq!(
            refusal.challenge(),
            r#"{"status":"insufficient_scope", "scope":"a c"}"#
        );
    }

    fn config<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn settings_follow_kafkas_configs() {
        let s = settings(config(&[]), None).unwrap();
        assert_eq!(s.validator, Validator::Unsecured);
        let jaas = r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredValidatorPrincipalClaimName="name" unsecuredValidatorRequiredScope="x y" unsecuredValidatorAllowableClockSkewMs="500";"#;
        let s = settings(config(&[]), Some(jaas)).unwrap();
        assert_eq!(s.rules.subject_claim, "name");
        assert_eq!(s.rules.required_scopes, vec!["x", "y"]);
        assert_eq!(s.rules.clock_skew_ms, 500);

        let jwks = [
            (
                "sasl.server.callback.handler.class",
                VALIDATOR_CALLBACK_HANDLER,
            ),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "file:///etc/moldau/jwks.json",
            ),
            ("sasl.oauthbearer.expected.audience", "kafka, other"),
            ("sasl.oauthbearer.expected.issuer", "https://idp.example"),
            ("sasl.oauthbearer.clock.skew.seconds", "5"),
        ];
        let s = settings(config(&jwks), None).unwrap();
        assert!(
            matches!(&s.validator, Validator::Jwks { url: JwksUrl::File(p), refresh_ms: 3_600_000, .. } if p.to_str() == Some("/etc/moldau/jwks.json"))
        );
        assert_eq!(s.rules.expected_audience, vec!["kafka", "other"]);
        assert_eq!(s.rules.clock_skew_ms, 5_000);
        assert!(s.rules.require_issued_at);

        // Kafka 4.4 wants the audience and issuer checked unless told not to
        let e = settings(config(&jwks[..2]), None).unwrap_err();
        assert!(e.contains("expected.audience"), "{e}");
        let opted_out = [
            jwks[0],
            jwks[1],
            ("sasl.oauthbearer.allow.unverified.audience", "true"),
            ("sasl.oauthbearer.allow.unverified.issuer", "true"),
        ];
        assert!(settings(config(&opted_out), None).is_ok());
        let e = settings(config(&[jwks[0]]), None).unwrap_err();
        assert!(e.contains("jwks.endpoint.url"), "{e}");
        let e = settings(
            config(&[("sasl.server.callback.handler.class", "com.example.Mine")]),
            None,
        )
        .unwrap_err();
        assert!(e.contains("com.example.Mine"), "{e}");
        for bad in ["ftp://x/jwks", "file:relative.json", "jwks.json"] {
            assert!(JwksUrl::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            JwksUrl::parse("https://idp.example/jwks").unwrap(),
            JwksUrl::Http("https://idp.example/jwks".into())
        );
    }
}
