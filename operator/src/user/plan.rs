//! The pure planner of `KafkaUser`: validates a spec into the ACL bindings
//! it wants; from those and the bindings the broker has for the principal
//! (DescribeAcls), the exact bindings to create and to delete; from the
//! mechanism, the password, the fingerprint of the password last applied
//! and the mechanisms the broker has (DescribeUserScramCredentials), the
//! AlterUserScramCredentials deletions and upsertion (salted client-side);
//! for a tls user, whether its certificate is kept or reissued (the rules
//! of `certs::plan`, against the clients CA); and the content of the
//! user's Secret.
//!
//! Why a fingerprint: the broker keeps only salted keys and never gives a
//! password back, so the operator cannot compare. It records an HMAC of
//! the password it applied (keyed by the password, over the mechanism name)
//! on the user's Secret once the broker accepted it, and re-applies when
//! the password's fingerprint differs or the mechanism is missing.
//! Randomness (salts, generated passwords, keys) comes from the caller.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::certs::issue::{LeafSpec, Usage};
use crate::certs::plan::{leaf_decision, policy_not_after, CaPolicy, Decision, LeafWant};
use crate::certs::{user_dn, Pem, CA_CERT_KEY};
use crate::crd::{
    AclOperationSpec, AclPatternType, AclResourceType, AclRuleSpec, AclRuleType, KafkaUser,
    UserAuthenticationType,
};
use crate::kafka::acl::{operation, pattern, permission, resource, AclBinding, CLUSTER_NAME};
use crate::kafka::scram::{
    ScramDeletion, ScramMechanism, ScramUpsertion, UserMechanisms, ITERATIONS,
};

/// Length of a generated password.
pub const PASSWORD_LENGTH: usize = 32;
/// Characters of a generated password (safe in JAAS strings and shells).
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/// Key of the password in the user's Secret (Strimzi's).
pub const PASSWORD_KEY: &str = "password";
/// Key of the JAAS configuration in the user's Secret (Strimzi's).
pub const JAAS_KEY: &str = "sasl.jaas.config";

/// Key of a tls user's certificate in its Secret (Strimzi's).
pub const USER_CERT_KEY: &str = "user.crt";
/// Key of a tls user's private key in its Secret (Strimzi's).
pub const USER_KEY_KEY: &str = "user.key";

/// The Kafka user name of `user`: the name for SCRAM, its certificate's
/// subject `CN=<user>` for tls (what the broker reads from the certificate).
pub fn username(t: UserAuthenticationType, user: &str) -> String {
    match t {
        UserAuthenticationType::Tls => user_dn(user),
        _ => user.to_string(),
    }
}

/// The principal of `user`: `User:<username>`.
pub fn principal(t: UserAuthenticationType, user: &str) -> String {
    format!("User:{}", username(t, user))
}

/// Both principals a KafkaUser owns, the one of its type first: a switch
/// of type removes what the other one had.
pub fn principals(t: UserAuthenticationType, user: &str) -> [String; 2] {
    let other = match t {
        UserAuthenticationType::Tls => UserAuthenticationType::ScramSha512,
        _ => UserAuthenticationType::Tls,
    };
    [principal(t, user), principal(other, user)]
}

/// The SCRAM mechanism of a spec's authentication type (None for tls).
pub fn mechanism(t: UserAuthenticationType) -> Option<ScramMechanism> {
    match t {
        UserAuthenticationType::ScramSha512 => Some(ScramMechanism::Sha512),
        UserAuthenticationType::ScramSha256 => Some(ScramMechanism::Sha256),
        UserAuthenticationType::Tls => None,
    }
}

fn operation_code(op: AclOperationSpec) -> i8 {
    match op {
        AclOperationSpec::Read => operation::READ,
        AclOperationSpec::Write => operation::WRITE,
        AclOperationSpec::Create => operation::CREATE,
        AclOperationSpec::Delete => operation::DELETE,
        AclOperationSpec::Alter => operation::ALTER,
        AclOperationSpec::Describe => operation::DESCRIBE,
        AclOperationSpec::ClusterAction => operation::CLUSTER_ACTION,
        AclOperationSpec::DescribeConfigs => operation::DESCRIBE_CONFIGS,
        AclOperationSpec::AlterConfigs => operation::ALTER_CONFIGS,
        AclOperationSpec::IdempotentWrite => operation::IDEMPOTENT_WRITE,
        AclOperationSpec::All => operation::ALL,
    }
}

/// The bindings of one rule, or why the rule is invalid.
fn rule_bindings(principal: &str, i: usize, rule: &AclRuleSpec) -> Result<Vec<AclBinding>, String> {
    let r = &rule.resource;
    let (resource_type, name) = match r.type_ {
        AclResourceType::Cluster => match r.name.as_deref() {
            None | Some("") | Some(CLUSTER_NAME) => (resource::CLUSTER, CLUSTER_NAME.to_string()),
            Some(other) => {
                return Err(format!(
                    "acls[{i}]: a cluster resource is named {CLUSTER_NAME:?}, not {other:?}"
                ))
            }
        },
        t => {
            let name = match r.name.as_deref() {
                Some(n) if !n.is_empty() => n.to_string(),
                _ => return Err(format!("acls[{i}]: a {t:?} resource needs a name")),
            };
            let code = match t {
                AclResourceType::Topic => resource::TOPIC,
                AclResourceType::Group => resource::GROUP,
                _ => resource::TRANSACTIONAL_ID,
            };
            (code, name)
        }
    };
    let pattern_type = match (r.pattern_type, r.type_) {
        (AclPatternType::Literal, _) => pattern::LITERAL,
        (AclPatternType::Prefix, AclResourceType::Cluster) => {
            return Err(format!(
                "acls[{i}]: a cluster resource takes patternType literal"
            ))
        }
        (AclPatternType::Prefix, _) if name == "*" => {
            return Err(format!(
                "acls[{i}]: a prefix pattern of \"*\" matches only names starting with '*'; use literal \"*\" for every name"
            ))
        }
        (AclPatternType::Prefix, _) => pattern::PREFIXED,
    };
    if rule.operations.is_empty() {
        return Err(format!("acls[{i}]: operations is empty"));
    }
    if rule.host.is_empty() {
        return Err(format!("acls[{i}]: host is empty (\"*\" means any host)"));
    }
    let perm = match rule.type_ {
        AclRuleType::Allow => permission::ALLOW,
        AclRuleType::Deny => permission::DENY,
    };
    Ok(rule
        .operations
        .iter()
        .map(|op| AclBinding {
            resource_type,
            resource_name: name.clone(),
            pattern_type,
            principal: principal.to_string(),
            host: rule.host.clone(),
            operation: operation_code(*op),
            permission: perm,
        })
        .collect())
}

/// The ACL bindings a KafkaUser wants (sorted, without duplicates), with
/// the principal of its authentication type, or why its spec is invalid.
pub fn desired_acls(ku: &KafkaUser, user: &str) -> Result<Vec<AclBinding>, String> {
    let p = principal(ku.spec.authentication.type_, user);
    let mut out = BTreeSet::new();
    for (i, rule) in ku
        .spec
        .authorization
        .iter()
        .flat_map(|a| a.acls.iter())
        .enumerate()
    {
        out.extend(rule_bindings(&p, i, rule)?);
    }
    Ok(out.into_iter().collect())
}

/// The ACL changes that make the broker's bindings of `principal` exactly
/// `desired`: `(to create, to delete)`. Bindings of other principals in
/// `current` are never touched.
pub fn acl_diff(
    principal: &str,
    desired: &[AclBinding],
    current: &[AclBinding],
) -> (Vec<AclBinding>, Vec<AclBinding>) {
    let p = principal;
    let desired: BTreeSet<&AclBinding> = desired.iter().collect();
    let current: BTreeSet<&AclBinding> = current.iter().filter(|a| a.principal == p).collect();
    let create = desired.difference(&current).map(|a| (*a).clone()).collect();
    let delete = current.difference(&desired).map(|a| (*a).clone()).collect();
    (create, delete)
}

/// Fingerprint of a password applied with a mechanism: hex
/// HMAC-SHA-256(key = password, message = mechanism name).
pub fn password_fingerprint(mechanism: ScramMechanism, password: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(password.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(mechanism.name().as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The SCRAM changes of one user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScramPlan {
    /// Credentials of other mechanisms to remove.
    pub deletions: Vec<ScramDeletion>,
    /// The credential to set, when the password changed or the mechanism is
    /// missing.
    pub upsertion: Option<ScramUpsertion>,
    /// The fingerprint to record once the broker accepted the plan.
    pub fingerprint: String,
}

/// Plans the SCRAM credentials of `user`: only `mechanism` with `password`.
/// `applied` is the fingerprint recorded after the last accepted upsertion;
/// `salt` is used only when an upsertion is needed.
pub fn plan_scram(
    user: &str,
    mechanism: ScramMechanism,
    password: &str,
    applied: Option<&str>,
    current: &UserMechanisms,
    salt: &[u8],
) -> ScramPlan {
    let fingerprint = password_fingerprint(mechanism, password);
    let deletions = current
        .keys()
        .filter(|m| **m != mechanism)
        .map(|m| ScramDeletion {
            user: user.to_string(),
            mechanism: *m,
        })
        .collect();
    let upsertion = (!current.contains_key(&mechanism) || applied != Some(fingerprint.as_str()))
        .then(|| ScramUpsertion {
            user: user.to_string(),
            mechanism,
            iterations: ITERATIONS,
            salt: salt.to_vec(),
            salted_password: mechanism.salted_password(password.as_bytes(), salt, ITERATIONS),
        });
    ScramPlan {
        deletions,
        upsertion,
        fingerprint,
    }
}

/// Every credential of `user`, for removal.
pub fn scram_removal(user: &str, current: &UserMechanisms) -> Vec<ScramDeletion> {
    current
        .keys()
        .map(|m| ScramDeletion {
            user: user.to_string(),
            mechanism: *m,
        })
        .collect()
}

/// A password of [`PASSWORD_LENGTH`] characters from random bytes, or None
/// when the bytes did not suffice (rejection sampling keeps every character
/// equally likely: bytes of 248 and above are skipped).
pub fn password_from_random(bytes: &[u8]) -> Option<String> {
    let limit = (256 / ALPHABET.len() * ALPHABET.len()) as u8;
    let out: String = bytes
        .iter()
        .filter(|b| **b < limit)
        .take(PASSWORD_LENGTH)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    (out.len() == PASSWORD_LENGTH).then_some(out)
}

/// A JAAS string literal: Kafka's parser (a `StreamTokenizer` with `"`
/// quotes) takes backslash escapes.
fn jaas_quote(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Strimzi's `sasl.jaas.config` value of a SCRAM user.
pub fn jaas_config(user: &str, password: &str) -> String {
    format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username={} password={};",
        jaas_quote(user),
        jaas_quote(password)
    )
}

/// Where the password comes from, given what the controller read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordChoice {
    /// From the referenced Secret key, or kept from the user's own Secret.
    Known(String),
    /// Generate one (no reference, nothing kept yet).
    Generate,
}

/// Chooses the password: the referenced Secret's key when the spec names
/// one (`referenced`: that Secret's data, None when it does not exist),
/// else the one kept in the user's own Secret, else a new one. Errors are
/// `(reason, message)` for the Ready condition.
pub fn choose_password(
    ku: &KafkaUser,
    referenced: Option<&std::collections::BTreeMap<String, Vec<u8>>>,
    own: Option<&std::collections::BTreeMap<String, Vec<u8>>>,
) -> Result<PasswordChoice, (&'static str, String)> {
    match &ku.spec.authentication.password {
        Some(src) => {
            let r = &src.value_from.secret_key_ref;
            let data = referenced.ok_or((
                "PasswordSecretNotFound",
                format!("Secret {} does not exist", r.name),
            ))?;
            let bytes = data.get(&r.key).ok_or((
                "PasswordKeyNotFound",
                format!("Secret {} has no key {}", r.name, r.key),
            ))?;
            let password = String::from_utf8(bytes.clone()).map_err(|_| {
                (
                    "InvalidPassword",
                    format!("key {} of Secret {} is not UTF-8", r.key, r.name),
                )
            })?;
            if password.is_empty() {
                return Err((
                    "InvalidPassword",
                    format!("key {} of Secret {} is empty", r.key, r.name),
                ));
            }
            Ok(PasswordChoice::Known(password))
        }
        None => Ok(own
            .and_then(|d| d.get(PASSWORD_KEY))
            .and_then(|b| String::from_utf8(b.clone()).ok())
            .filter(|p| !p.is_empty())
            .map(PasswordChoice::Known)
            .unwrap_or(PasswordChoice::Generate)),
    }
}

/// The certificate and key kept in a tls user's Secret, if both are there.
pub fn stored_certificate(own: Option<&BTreeMap<String, Vec<u8>>>) -> Option<Pem> {
    let text = |k: &str| own?.get(k).and_then(|b| String::from_utf8(b.clone()).ok());
    Some(Pem {
        cert: text(USER_CERT_KEY)?,
        key: text(USER_KEY_KEY)?,
    })
}

/// Whether a tls user's certificate is kept or (re)issued: subject exactly
/// `CN=<user>`, no DNS names, signed by the clients CA, not due.
pub fn certificate_decision(
    user: &str,
    current: Option<&Pem>,
    clients_ca_cert: &str,
    now: SystemTime,
    policy: CaPolicy,
) -> Decision {
    let dn = user_dn(user);
    let want = LeafWant {
        dn: &dn,
        dns_names: &[],
        ca_cert: clients_ca_cert,
    };
    leaf_decision(current, want, now, policy)
}

/// The certificate to issue for a tls user: `CN=<user>`, client
/// authentication only, the policy's validity but never past the clients
/// CA's end.
pub fn certificate_spec(
    user: &str,
    now: SystemTime,
    policy: CaPolicy,
    clients_ca_not_after: SystemTime,
) -> LeafSpec {
    LeafSpec {
        common_name: user.to_string(),
        organisation: None,
        dns_names: Vec::new(),
        usage: Usage::Client,
        not_after: policy_not_after(now, policy, clients_ca_not_after),
    }
}

/// The data of a tls user's Secret: its certificate and key, and the
/// cluster CA certificate a client verifies the brokers with.
pub fn tls_secret_data(cluster_ca_cert: &str, cert: &Pem) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CA_CERT_KEY.to_string(), cluster_ca_cert.to_string()),
        (USER_CERT_KEY.to_string(), cert.cert.clone()),
        (USER_KEY_KEY.to_string(), cert.key.clone()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn ku(spec: serde_json::Value) -> KafkaUser {
        let mut spec = spec;
        spec["clusterRef"] = "c".into();
        KafkaUser::new("alice", serde_json::from_value(spec).unwrap())
    }

    fn with_acls(acls: serde_json::Value) -> KafkaUser {
        ku(serde_json::json!({
            "authentication": {"type": "scram-sha-512"},
            "authorization": {"type": "simple", "acls": acls}
        }))
    }

    fn binding(rt: i8, name: &str, pt: i8, op: i8, perm: i8) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    #[test]
    fn rules_become_one_binding_per_operation_with_defaults() {
        let u = with_acls(serde_json::json!([
            {"resource": {"type": "topic", "name": "orders", "patternType": "prefix"},
             "operations": ["Read", "Describe", "Read"]},
            {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"], "type": "deny",
             "host": "127.0.0.2"},
            {"resource": {"type": "transactionalId", "name": "*"}, "operations": ["All"]},
            {"resource": {"type": "group", "name": "g"}, "operations": ["Read"]}
        ]));
        let acls = desired_acls(&u, "alice").unwrap();
        let mut deny = binding(
            resource::CLUSTER,
            CLUSTER_NAME,
            pattern::LITERAL,
            operation::IDEMPOTENT_WRITE,
            permission::DENY,
        );
        deny.host = "127.0.0.2".into();
        let mut want = vec![
            binding(
                resource::TOPIC,
                "orders",
                pattern::PREFIXED,
                operation::READ,
                permission::ALLOW,
            ),
            binding(
                resource::TOPIC,
                "orders",
                pattern::PREFIXED,
                operation::DESCRIBE,
                permission::ALLOW,
            ),
            deny,
            binding(
                resource::TRANSACTIONAL_ID,
                "*",
                pattern::LITERAL,
                operation::ALL,
                permission::ALLOW,
            ),
            binding(
                resource::GROUP,
                "g",
                pattern::LITERAL,
                operation::READ,
                permission::ALLOW,
            ),
        ];
        want.sort();
        assert_eq!(acls, want, "the duplicate Read is one binding");
        // no authorization: no ACLs
        let none = ku(serde_json::json!({"authentication": {"type": "scram-sha-256"}}));
        assert!(desired_acls(&none, "alice").unwrap().is_empty());
    }

    #[test]
    fn bad_rules_are_reasons_not_panics() {
        for (acls, needle) in [
            (
                serde_json::json!([{"resource": {"type": "topic"}, "operations": ["Read"]}]),
                "needs a name",
            ),
            (
                serde_json::json!([{"resource": {"type": "group", "name": ""}, "operations": ["Read"]}]),
                "needs a name",
            ),
            (
                serde_json::json!([{"resource": {"type": "cluster", "name": "other"}, "operations": ["Alter"]}]),
                "kafka-cluster",
            ),
            (
                serde_json::json!([{"resource": {"type": "cluster", "patternType": "prefix"}, "operations": ["Alter"]}]),
                "literal",
            ),
            (
                serde_json::json!([{"resource": {"type": "topic", "name": "*", "patternType": "prefix"}, "operations": ["Read"]}]),
                "literal \"*\"",
            ),
            (
                serde_json::json!([{"resource": {"type": "topic", "name": "t"}, "operations": []}]),
                "operations is empty",
            ),
            (
                serde_json::json!([{"resource": {"type": "topic", "name": "t"}, "operations": ["Read"], "host": ""}]),
                "host is empty",
            ),
        ] {
            let err = desired_acls(&with_acls(acls.clone()), "alice").unwrap_err();
            assert!(err.contains(needle), "{acls}: {err}");
            assert!(err.starts_with("acls[0]"), "{err}");
        }
        // an unknown operation or resource type does not even parse (the
        // CRD schema refuses it before the operator sees it)
        assert!(serde_json::from_value::<AclRuleSpec>(serde_json::json!(
            {"resource": {"type": "topic", "name": "t"}, "operations": ["Fly"]}
        ))
        .is_err());
    }

    #[test]
    fn acl_diff_is_exact_and_leaves_other_principals_alone() {
        let read = binding(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            operation::READ,
            permission::ALLOW,
        );
        let write = binding(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            operation::WRITE,
            permission::ALLOW,
        );
        let describe = binding(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            operation::DESCRIBE,
            permission::ALLOW,
        );
        let mut bob = read.clone();
        bob.principal = "User:bob".into();
        let (create, delete) = acl_diff(
            "User:alice",
            &[read.clone(), write.clone()],
            &[read.clone(), describe.clone(), bob.clone()],
        );
        assert_eq!(create, vec![write.clone()]);
        assert_eq!(delete, vec![describe.clone()]);
        // in sync: nothing to do
        let (create, delete) = acl_diff(
            "User:alice",
            std::slice::from_ref(&read),
            &[read.clone(), bob.clone()],
        );
        assert!(create.is_empty() && delete.is_empty());
        // nothing desired: every binding of alice goes, bob's stays
        let (create, delete) = acl_diff("User:alice", &[], &[read.clone(), bob]);
        assert!(create.is_empty());
        assert_eq!(delete, vec![read]);
    }

    #[test]
    fn scram_is_applied_only_when_missing_or_changed() {
        let salt = [7u8; 16];
        let m = ScramMechanism::Sha512;
        let fp = password_fingerprint(m, "pw");
        // missing mechanism: upsert, salted client-side
        let p = plan_scram("alice", m, "pw", Some(&fp), &UserMechanisms::new(), &salt);
        let up = p.upsertion.clone().unwrap();
        assert_eq!(up.iterations, 4096);
        assert_eq!(up.salt, salt);
        assert_eq!(up.salted_password, m.salted_password(b"pw", &salt, 4096));
        assert_eq!(p.fingerprint, fp);
        assert!(p.deletions.is_empty());
        // present and the same password: nothing
        let current = UserMechanisms::from([(m, 4096)]);
        let p = plan_scram("alice", m, "pw", Some(&fp), &current, &salt);
        assert_eq!(p.upsertion, None);
        // present but the password changed (or never recorded): upsert
        assert!(plan_scram("alice", m, "new", Some(&fp), &current, &salt)
            .upsertion
            .is_some());
        assert!(plan_scram("alice", m, "pw", None, &current, &salt)
            .upsertion
            .is_some());
        // mechanism switched: the old one goes, the new one is set
        let p = plan_scram(
            "alice",
            ScramMechanism::Sha256,
            "pw",
            Some(&fp),
            &current,
            &salt,
        );
        assert_eq!(
            p.deletions,
            vec![ScramDeletion {
                user: "alice".into(),
                mechanism: m
            }]
        );
        assert!(p.upsertion.is_some(), "the fingerprint is per mechanism");
        assert_eq!(scram_removal("alice", &current).len(), 1);
    }

    #[test]
    fn generated_passwords_are_32_alphanumerics() {
        let bytes: Vec<u8> = (0..=255).collect();
        let p = password_from_random(&bytes).unwrap();
        assert_eq!(p.len(), PASSWORD_LENGTH);
        assert!(p.bytes().all(|b| b.is_ascii_alphanumeric()));
        // bytes >= 248 are skipped, so too few bytes is None
        assert_eq!(password_from_random(&[250u8; 64]), None);
        assert_eq!(password_from_random(&[1u8; 10]), None);
    }

    #[test]
    fn jaas_config_is_strimzis_and_quotes() {
        assert_eq!(
            jaas_config("alice", "pw"),
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"pw\";"
        );
        assert!(jaas_config("a", "p\"w\\").contains("password=\"p\\\"w\\\\\";"));
    }

    #[test]
    fn password_choice() {
        let generated = ku(serde_json::json!({"authentication": {"type": "scram-sha-512"}}));
        assert_eq!(
            choose_password(&generated, None, None),
            Ok(PasswordChoice::Generate)
        );
        let own = BTreeMap::from([(PASSWORD_KEY.to_string(), b"kept".to_vec())]);
        assert_eq!(
            choose_password(&generated, None, Some(&own)),
            Ok(PasswordChoice::Known("kept".into()))
        );
        let given = ku(
            serde_json::json!({"authentication": {"type": "scram-sha-512",
            "password": {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}}}),
        );
        assert_eq!(
            choose_password(&given, None, Some(&own)).unwrap_err().0,
            "PasswordSecretNotFound"
        );
        let data = BTreeMap::from([("other".to_string(), b"x".to_vec())]);
        assert_eq!(
            choose_password(&given, Some(&data), None).unwrap_err().0,
            "PasswordKeyNotFound"
        );
        let data = BTreeMap::from([("k".to_string(), b"secret".to_vec())]);
        assert_eq!(
            choose_password(&given, Some(&data), Some(&own)),
            Ok(PasswordChoice::Known("secret".into()))
        );
    }

    fn tls_alice(acls: serde_json::Value) -> KafkaUser {
        ku(serde_json::json!({
            "authentication": {"type": "tls"},
            "authorization": {"type": "simple", "acls": acls}
        }))
    }

    #[test]
    fn a_tls_user_is_its_certificate_subject() {
        use UserAuthenticationType::*;
        assert_eq!(username(Tls, "alice"), "CN=alice");
        assert_eq!(username(ScramSha256, "alice"), "alice");
        assert_eq!(principal(Tls, "alice"), "User:CN=alice");
        assert_eq!(principal(ScramSha512, "alice"), "User:alice");
        assert_eq!(principals(Tls, "alice"), ["User:CN=alice", "User:alice"]);
        assert_eq!(
            principals(ScramSha256, "alice"),
            ["User:alice", "User:CN=alice"]
        );
        assert_eq!(mechanism(Tls), None);
        assert_eq!(mechanism(ScramSha256), Some(ScramMechanism::Sha256));
        let acls = desired_acls(
            &tls_alice(serde_json::json!([
                {"resource": {"type": "topic", "name": "t"}, "operations": ["Read"]}
            ])),
            "alice",
        )
        .unwrap();
        assert_eq!(acls.len(), 1);
        assert_eq!(acls[0].principal, "User:CN=alice");
        // the SCRAM principal's binding is not the tls user's
        let mut scram = acls[0].clone();
        scram.principal = "User:alice".into();
        let (create, delete) = acl_diff("User:CN=alice", &acls, std::slice::from_ref(&scram));
        assert_eq!((create, delete), (acls.clone(), vec![]));
    }

    #[test]
    fn a_tls_user_certificate_is_kept_until_due_and_reissued_from_another_ca() {
        use crate::certs::issue::{issue_leaf, new_ca};
        let day = std::time::Duration::from_secs(86_400);
        let now = SystemTime::now();
        let policy = CaPolicy::default();
        let ca = new_ca("c-clients-ca", now, 365).unwrap();
        let ca_end = now + 365 * day;
        let spec = certificate_spec("alice", now, policy, ca_end);
        assert_eq!(spec.not_after, now + 365 * day);
        assert_eq!(spec.usage, Usage::Client);
        // never past the CA
        assert_eq!(
            certificate_spec("alice", now, policy, now + 40 * day).not_after,
            now + 40 * day
        );
        let cert = issue_leaf("c-clients-ca", &ca.key, &spec, now).unwrap();
        assert_eq!(
            certificate_decision("alice", None, &ca.cert, now, policy),
            Decision::Create
        );
        assert_eq!(
            certificate_decision("alice", Some(&cert), &ca.cert, now, policy),
            Decision::Keep
        );
        assert!(matches!(
            certificate_decision("alice", Some(&cert), &ca.cert, now + 340 * day, policy),
            Decision::Renew(r) if r.contains("expires")
        ));
        assert!(matches!(
            certificate_decision("bob", Some(&cert), &ca.cert, now, policy),
            Decision::Renew(r) if r.contains("subject")
        ));
        let other = new_ca("c-clients-ca", now, 365).unwrap();
        assert!(matches!(
            certificate_decision("alice", Some(&cert), &other.cert, now, policy),
            Decision::Renew(r) if r.contains("not signed")
        ));
        // the Secret's data and back
        let data = tls_secret_data("cluster-ca", &cert);
        assert_eq!(data["ca.crt"], "cluster-ca");
        let stored: BTreeMap<String, Vec<u8>> =
            data.into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
        assert_eq!(stored_certificate(Some(&stored)), Some(cert));
        assert_eq!(stored_certificate(None), None);
        let mut partial = stored.clone();
        partial.remove(USER_KEY_KEY);
        assert_eq!(stored_certificate(Some(&partial)), None);
    }
}
