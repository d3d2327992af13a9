//! The SCRAM credential store's pure rules (issue 38): the set of users'
//! credentials as cluster metadata holds it, and Kafka's decisions over
//! it for DescribeUserScramCredentials and AlterUserScramCredentials
//! (KIP-554), with no I/O.
//!
//! This module owns:
//!
//! - [`ScramCredentials`]: every user's credential per mechanism, what the
//!   metadata image carries (`MetadataImage::scram_credential` reads it for
//!   SASL SCRAM), and its conversion from and to the persisted records
//!   (`moldau_coordination::records::ScramCredentialRecord`: the cluster
//!   record in cluster mode, `scram-credentials.json` of a standalone
//!   broker);
//! - [`plan_alter`]: an AlterUserScramCredentials request judged against
//!   the current credentials — one result per user and the changes to
//!   apply — and [`ScramCredentials::apply`];
//! - [`describe`]: a DescribeUserScramCredentials request answered from
//!   the credentials.
//!
//! Storing, forwarding to the controller and the wire shapes belong to the
//! callers (`controller::{facade, rpc}`, `handlers::scram_credentials`).
//! Like the rest of [`crate::security`] this is vocabulary: it imports
//! nothing else of the broker.
//!
//! # Kafka's semantics, kept
//!
//! As Kafka's controller (`ScramControlManager`), an alteration request
//! may name a user once: a second deletion or upsertion of the same user —
//! whatever its mechanism — is DUPLICATE_RESOURCE for that user, and none
//! of that user's alterations apply (so `kafka-configs --add-config
//! 'SCRAM-SHA-256=[…],SCRAM-SHA-512=[…]'` is refused by Kafka and here
//! alike; one mechanism per command works). Users are judged
//! independently: one user's refusal does not stop another's change. An
//! empty user name is UNACCEPTABLE_CREDENTIAL, a mechanism other than
//! SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2) UNSUPPORTED_SASL_MECHANISM,
//! iterations outside 4096..=16384 UNACCEPTABLE_CREDENTIAL ("Too few
//! iterations" / "Too many iterations"), deleting a credential that does
//! not exist RESOURCE_NOT_FOUND. The broker keeps the salt and derives
//! StoredKey and ServerKey from the salted password the client sends; the
//! salted password itself is not kept.
//!
//! A describe of no users (null or empty) describes every user with a
//! credential; a named user without any is RESOURCE_NOT_FOUND, one named
//! twice DUPLICATE_RESOURCE (once in the answer).
//!
//! # Deliberate differences from Kafka
//!
//! - results come in a fixed order (applied deletions, applied
//!   upsertions, then refusals, each in request order; a describe of all
//!   users by name; mechanisms by id) where Kafka's follow hash maps;
//! - an upsertion whose salted password is not one hash long (32 bytes for
//!   SHA-256, 64 for SHA-512), or whose salt is empty or longer than
//!   [`MAX_SALT_LEN`], is UNACCEPTABLE_CREDENTIAL: Kafka stores whatever
//!   it is sent (a salted password of another length makes a credential no
//!   client can ever use, an empty one fails as an internal error).
//!
//! # Where they live, and what is not done yet
//!
//! Cluster mode: the cluster record's `scramCredentials` (base64 fields;
//! in Kubernetes mode inside the cluster's MetadataShard, so the CRD in
//! `crds/` must be applied before brokers store credentials — an older
//! schema would prune the field), sent to every broker in FetchMetadata
//! (every broker verifies SCRAM clients). Standalone: the broker's
//! `scram-credentials.json`, written with the data directory's usual
//! permissions. Not done yet: authorization of the two APIs (Kafka asks
//! for ALTER, resp. DESCRIBE, on the cluster), a test of Kubernetes mode
//! against a real API server (dir mode is tested over gRPC), and the
//! `KafkaUser` resource that will drive these APIs.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use kafka_protocol::error::ResponseError;
use moldau_coordination::records::ScramCredentialRecord;

use super::scram::{ScramCredential, ScramMechanism};

/// The longest salt accepted (Kafka's own clients send 32 random bytes).
pub const MAX_SALT_LEN: usize = 1024;

/// Kafka's message for a user named twice in one alteration request.
pub const ALTERED_TWICE: &str = "A user credential cannot be altered twice in the same request";

/// Every user's SCRAM credentials, per mechanism.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScramCredentials {
    /// By user; per user indexed by [`slot`] of the mechanism, never all
    /// `None`.
    users: BTreeMap<String, [Option<ScramCredential>; 2]>,
}

/// The index of a mechanism in a user's slots.
fn slot(mechanism: ScramMechanism) -> usize {
    match mechanism {
        ScramMechanism::Sha256 => 0,
        ScramMechanism::Sha512 => 1,
    }
}

impl ScramCredentials {
    /// The credential of `user` for `mechanism`.
    pub fn get(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.users.get(user)?[slot(mechanism)].as_ref()
    }

    /// Stores (or replaces) a credential.
    pub fn insert(&mut self, user: &str, mechanism: ScramMechanism, credential: ScramCredential) {
        self.users.entry(user.to_string()).or_default()[slot(mechanism)] = Some(credential);
    }

    /// Removes a credential; whether there was one.
    pub fn remove(&mut self, user: &str, mechanism: ScramMechanism) -> bool {
        let Some(slots) = self.users.get_mut(user) else {
            return false;
        };
        let had = slots[slot(mechanism)].take().is_some();
        if slots.iter().all(Option::is_none) {
            self.users.remove(user);
        }
        had
    }

    /// Whether no user has a credential.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Users with at least one credential, by name.
    pub fn users(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }

    /// A user's credentials, by mechanism id.
    pub fn of_user(&self, user: &str) -> Vec<(ScramMechanism, &ScramCredential)> {
        ScramMechanism::ALL
            .into_iter()
            .filter_map(|m| Some((m, self.get(user, m)?)))
            .collect()
    }

    /// Every credential: by user, then mechanism id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, ScramMechanism, &ScramCredential)> {
        self.users.iter().flat_map(|(user, slots)| {
            ScramMechanism::ALL
                .into_iter()
                .filter_map(move |m| Some((user.as_str(), m, slots[slot(m)].as_ref()?)))
        })
    }

    /// Applies the changes of a [`plan_alter`].
    pub fn apply(&mut self, changes: &[Change]) {
        for change in changes {
            match change {
                Change::Upsert {
                    user,
                    mechanism,
                    credential,
                } => self.insert(user, *mechanism, credential.clone()),
                Change::Delete { user, mechanism } => {
                    self.remove(user, *mechanism);
                }
            }
        }
    }

    /// The credentials of persisted records. A record that cannot be used
    /// (empty user, unknown mechanism, bad base64, iterations out of
    /// range) is left out and named in the second list, for the caller to
    /// report; a later record of the same user and mechanism wins.
    pub fn from_records(records: &[ScramCredentialRecord]) -> (Self, Vec<String>) {
        let mut out = Self::default();
        let mut skipped = Vec::new();
        for r in records {
            match credential_of_record(r) {
                Ok((mechanism, credential)) => out.insert(&r.user, mechanism, credential),
                Err(why) => skipped.push(format!(
                    "SCRAM credential of user {:?} ({}): {why}",
                    r.user, r.mechanism
                )),
            }
        }
        (out, skipped)
    }

    /// The persisted form: by user, then mechanism id.
    pub fn to_records(&self) -> Vec<ScramCredentialRecord> {
        self.iter()
            .map(|(user, mechanism, c)| ScramCredentialRecord {
                user: user.to_string(),
                mechanism: mechanism.name().to_string(),
                salt: B64.encode(&c.salt),
                stored_key: B64.encode(&c.stored_key),
                server_key: B64.encode(&c.server_key),
                iterations: i32::try_from(c.iterations).unwrap_or(i32::MAX),
            })
            .collect()
    }
}

fn credential_of_record(
    r: &ScramCredentialRecord,
) -> Result<(ScramMechanism, ScramCredential), &'static str> {
    if r.user.is_empty() {
        return Err("empty user name");
    }
    let mechanism = ScramMechanism::from_name(&r.mechanism).ok_or("unknown mechanism")?;
    let iterations = u32::try_from(r.iterations)
        .ok()
        .filter(|n| *n >= mechanism.min_iterations())
        .ok_or("iterations out of range")?;
    let decode = |s: &str| B64.decode(s).map_err(|_| "not base64");
    let credential = ScramCredential {
        salt: decode(&r.salt)?,
        stored_key: decode(&r.stored_key)?,
        server_key: decode(&r.server_key)?,
        iterations,
    };
    if credential.stored_key.len() != mechanism.hash_len()
        || credential.server_key.len() != mechanism.hash_len()
    {
        return Err("keys of the wrong length");
    }
    Ok((mechanism, credential))
}

/// An AlterUserScramCredentials deletion as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub user: String,
    /// The wire id (1: SCRAM-SHA-256, 2: SCRAM-SHA-512).
    pub mechanism: i8,
}

/// An AlterUserScramCredentials upsertion as sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Upsertion {
    pub user: String,
    /// The wire id (1: SCRAM-SHA-256, 2: SCRAM-SHA-512).
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    /// Hi(password, salt, iterations), computed by the client.
    pub salted_password: Vec<u8>,
}

impl std::fmt::Debug for Upsertion {
    /// The salted password is left out: it is as good as the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upsertion")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .field("salted_password", &"<redacted>")
            .finish()
    }
}

/// A change to the credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Upsert {
        user: String,
        mechanism: ScramMechanism,
        credential: ScramCredential,
    },
    Delete {
        user: String,
        mechanism: ScramMechanism,
    },
}

/// One user's answer: `None` when its alteration applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserResult {
    pub user: String,
    pub error: Option<(ResponseError, String)>,
}

/// What an alteration request amounts to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AlterPlan {
    /// One per user named in the request.
    pub results: Vec<UserResult>,
    /// The changes of the users whose result is a success.
    pub changes: Vec<Change>,
}

/// The refusal of a user name and mechanism id, or the mechanism.
fn check_user_and_mechanism(
    user: &str,
    mechanism: i8,
) -> Result<ScramMechanism, (ResponseError, String)> {
    if user.is_empty() {
        return Err((
            ResponseError::UnacceptableCredential,
            "Username must not be empty".into(),
        ));
    }
    ScramMechanism::from_id(mechanism).ok_or((
        ResponseError::UnsupportedSaslMechanism,
        "Unknown SCRAM mechanism".into(),
    ))
}

/// The credential an upsertion stores, or why it is refused.
fn check_upsertion(
    u: &Upsertion,
) -> Result<(ScramMechanism, ScramCredential), (ResponseError, String)> {
    let mechanism = check_user_and_mechanism(&u.user, u.mechanism)?;
    let unacceptable = |m: &str| (ResponseError::UnacceptableCredential, m.to_string());
    let iterations = mechanism
        .validate_iterations(u.iterations)
        .map_err(unacceptable)?;
    if u.salt.is_empty() || u.salt.len() > MAX_SALT_LEN {
        return Err(unacceptable(&format!(
            "The salt must be 1 to {MAX_SALT_LEN} bytes long"
        )));
    }
    if u.salted_password.len() != mechanism.hash_len() {
        return Err(unacceptable(&format!(
            "The salted password of {} must be {} bytes long",
            mechanism.name(),
            mechanism.hash_len()
        )));
    }
    let credential =
        ScramCredential::from_salted_password(mechanism, &u.salted_password, &u.salt, iterations);
    Ok((mechanism, credential))
}

/// Judges an AlterUserScramCredentials request against `current` (see the
/// module doc for the rules). Pure: nothing changes until the caller
/// applies [`AlterPlan::changes`] (and persists them).
pub fn plan_alter(
    current: &ScramCredentials,
    deletions: &[Deletion],
    upsertions: &[Upsertion],
) -> AlterPlan {
    // per user: the request position that decided it, and the decision
    let mut refused: BTreeMap<&str, (usize, (ResponseError, String))> = BTreeMap::new();
    let mut deleting: BTreeMap<&str, (usize, ScramMechanism)> = BTreeMap::new();
    let mut upserting: BTreeMap<&str, (usize, ScramMechanism, ScramCredential)> = BTreeMap::new();
    let duplicate = || (ResponseError::DuplicateResource, ALTERED_TWICE.to_string());
    for (at, d) in deletions.iter().enumerate() {
        let user = d.user.as_str();
        if refused.contains_key(user) {
            continue;
        }
        if deleting.remove(user).is_some() {
            refused.insert(user, (at, duplicate()));
            continue;
        }
        let checked = check_user_and_mechanism(user, d.mechanism).and_then(|m| {
            current.get(user, m).map(|_| m).ok_or((
                ResponseError::ResourceNotFound,
                "Attempt to delete a user credential that does not exist".to_string(),
            ))
        });
        match checked {
            Ok(m) => {
                deleting.insert(user, (at, m));
            }
            Err(e) => {
                refused.insert(user, (at, e));
            }
        }
    }
    let base = deletions.len();
    for (at, u) in upsertions.iter().enumerate() {
        let at = base + at;
        let user = u.user.as_str();
        if refused.contains_key(user) {
            continue;
        }
        if deleting.remove(user).is_some() || upserting.remove(user).is_some() {
            refused.insert(user, (at, duplicate()));
            continue;
        }
        match check_upsertion(u) {
            Ok((m, credential)) => {
                upserting.insert(user, (at, m, credential));
            }
            Err(e) => {
                refused.insert(user, (at, e));
            }
        }
    }
    let mut deleted: Vec<_> = deleting.into_iter().collect();
    deleted.sort_by_key(|(_, (at, _))| *at);
    let mut upserted: Vec<_> = upserting.into_iter().collect();
    upserted.sort_by_key(|(_, (at, _, _))| *at);
    let mut refusals: Vec<_> = refused.into_iter().collect();
    refusals.sort_by_key(|(_, (at, _))| *at);

    let mut plan = AlterPlan::default();
    for (user, (_, mechanism)) in deleted {
        plan.results.push(UserResult {
            user: user.to_string(),
            error: None,
        });
        plan.changes.push(Change::Delete {
            user: user.to_string(),
            mechanism,
        });
    }
    for (user, (_, mechanism, credential)) in upserted {
        plan.results.push(UserResult {
            user: user.to_string(),
            error: None,
        });
        plan.changes.push(Change::Upsert {
            user: user.to_string(),
            mechanism,
            credential,
        });
    }
    for (user, (_, error)) in refusals {
        plan.results.push(UserResult {
            user: user.to_string(),
            error: Some(error),
        });
    }
    plan
}

/// One user's DescribeUserScramCredentials answer: its credentials'
/// mechanisms and iterations (by mechanism id), or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub user: String,
    pub result: Result<Vec<(ScramMechanism, u32)>, (ResponseError, String)>,
}

/// Answers DescribeUserScramCredentials (see the module doc): `users`
/// `None` or empty describes every user with a credential.
pub fn describe(credentials: &ScramCredentials, users: Option<&[String]>) -> Vec<Described> {
    let infos = |user: &str| -> Vec<(ScramMechanism, u32)> {
        credentials
            .of_user(user)
            .into_iter()
            .map(|(m, c)| (m, c.iterations))
            .collect()
    };
    let users = match users {
        Some(users) if !users.is_empty() => users,
        _ => {
            return credentials
                .users()
                .map(|user| Described {
                    user: user.to_string(),
                    result: Ok(infos(user)),
                })
                .collect()
        }
    };
    // first position and how often each user is named
    let mut named: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (at, user) in users.iter().enumerate() {
        named.entry(user.as_str()).or_insert((at, 0)).1 += 1;
    }
    let mut named: Vec<_> = named.into_iter().collect();
    named.sort_by_key(|(_, (at, _))| *at);
    named
        .into_iter()
        .map(|(user, (_, times))| {
            let result = if times > 1 {
                Err((
                    ResponseError::DuplicateResource,
                    format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                    ),
                ))
            } else {
                let found = infos(user);
                if found.is_empty() {
                    Err((
                        ResponseError::ResourceNotFound,
                        format!("Attempt to describe a user credential that does not exist: {user}"),
                    ))
                } else {
                    Ok(found)
                }
            };
            Described {
                user: user.to_string(),
                result,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA256: i8 = 1;
    const SHA512: i8 = 2;

    fn salted(m: ScramMechanism, password: &str) -> Vec<u8> {
        m.salted_password(password.as_bytes(), b"salt-salt", 4096)
    }

    fn up(user: &str, mechanism: i8, iterations: i32) -> Upsertion {
        let m = ScramMechanism::from_id(mechanism).unwrap_or(ScramMechanism::Sha256);
        Upsertion {
            user: user.into(),
            mechanism,
            iterations,
            salt: b"salt-salt".to_vec(),
            salted_password: salted(m, "pw"),
        }
    }

    fn del(user: &str, mechanism: i8) -> Deletion {
        Deletion {
            user: user.into(),
            mechanism,
        }
    }

    fn outcome(plan: &AlterPlan) -> Vec<(String, Option<ResponseError>)> {
        plan.results
            .iter()
            .map(|r| (r.user.clone(), r.error.as_ref().map(|(c, _)| *c)))
            .collect()
    }

    fn with_alice() -> ScramCredentials {
        let mut c = ScramCredentials::default();
        let plan = plan_alter(&c, &[], &[up("alice", SHA256, 8192)]);
        c.apply(&plan.changes);
        c
    }

    #[test]
    fn an_upsertion_stores_the_derived_keys_not_the_password() {
        let c = with_alice();
        let stored = c.get("alice", ScramMechanism::Sha256).unwrap();
        let expected = ScramCredential::from_salted_password(
            ScramMechanism::Sha256,
            &salted(ScramMechanism::Sha256, "pw"),
            b"salt-salt",
            8192,
        );
        assert_eq!(stored, &expected);
        assert_eq!(c.get("alice", ScramMechanism::Sha512), None);
        let records = c.to_records();
        assert_eq!(records.len(), 1);
        let salted_b64 = B64.encode(salted(ScramMechanism::Sha256, "pw"));
        let json = serde_json::to_string(&records).unwrap();
        assert!(!json.contains(&salted_b64), "{json}");
        assert_eq!(records[0].mechanism, "SCRAM-SHA-256");
        assert_eq!(records[0].iterations, 8192);
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_skipped() {
        let mut c = with_alice();
        let plan = plan_alter(&c, &[], &[up("bob", SHA512, 4096)]);
        c.apply(&plan.changes);
        let records = c.to_records();
        let (back, skipped) = ScramCredentials::from_records(&records);
        assert_eq!(back, c);
        assert!(skipped.is_empty());

        let mut bad = records.clone();
        bad[0].mechanism = "SCRAM-SHA-1".into();
        bad[1].salt = "not base64!".into();
        let mut short = records[0].clone();
        short.user = "carol".into();
        short.stored_key = B64.encode([1, 2, 3]);
        let mut empty = records[0].clone();
        empty.user = String::new();
        let mut few = records[0].clone();
        few.user = "dave".into();
        few.iterations = -5;
        bad.extend([short, empty, few]);
        let (read, skipped) = ScramCredentials::from_records(&bad);
        assert!(read.is_empty(), "{read:?}");
        assert_eq!(skipped.len(), 5, "{skipped:?}");
    }

    #[test]
    fn removing_the_last_mechanism_forgets_the_user() {
        let mut c = with_alice();
        assert!(!c.remove("alice", ScramMechanism::Sha512));
        assert!(c.remove("alice", ScramMechanism::Sha256));
        assert!(c.is_empty());
        assert_eq!(c.users().count(), 0);
    }

    #[test]
    fn refusals_carry_kafkas_codes() {
        use ResponseError::*;
        let c = with_alice();
        let plan = plan_alter(
            &c,
            &[del("", SHA256), del("bob", SHA256), del("carl", 0)],
            &[
                up("dan", 3, 4096),
                up("erin", SHA256, 4095),
                up("fay", SHA512, 16385),
                up("gus", SHA256, -1),
                up("", SHA512, 4096),
                up("hal", SHA256, 16384),
            ],
        );
        assert_eq!(
            outcome(&plan),
            vec![
                ("hal".into(), None),
                ("".into(), Some(UnacceptableCredential)),
                ("bob".into(), Some(ResourceNotFound)),
                ("carl".into(), Some(UnsupportedSaslMechanism)),
                ("dan".into(), Some(UnsupportedSaslMechanism)),
                ("erin".into(), Some(UnacceptableCredential)),
                ("fay".into(), Some(UnacceptableCredential)),
                ("gus".into(), Some(UnacceptableCredential)),
            ]
        );
        let messages: Vec<_> = plan
            .results
            .iter()
            .filter_map(|r| r.error.as_ref().map(|(_, m)| m.as_str()))
            .collect();
        assert_eq!(
            messages,
            [
                "Username must not be empty",
                "Attempt to delete a user credential that does not exist",
                "Unknown SCRAM mechanism",
                "Unknown SCRAM mechanism",
                "Too few iterations",
                "Too many iterations",
                "Too few iterations",
            ]
        );
        assert_eq!(plan.changes.len(), 1);
    }

    #[test]
    fn a_user_may_be_named_once_per_request() {
        use ResponseError::*;
        let mut c = with_alice();
        let plan = plan_alter(&c, &[], &[up("bob", SHA512, 4096)]);
        c.apply(&plan.changes);
        // two mechanisms of one user: refused, as Kafka's controller does
        let plan = plan_alter(
            &c,
            &[],
            &[up("carl", SHA256, 4096), up("carl", SHA512, 4096)],
        );
        assert_eq!(
            outcome(&plan),
            vec![("carl".into(), Some(DuplicateResource))]
        );
        assert!(plan.changes.is_empty());
        assert_eq!(plan.results[0].error.as_ref().unwrap().1, ALTERED_TWICE);
        // a deletion and an upsertion of one user, and of the same mechanism
        let plan = plan_alter(
            &c,
            &[del("alice", SHA256), del("bob", SHA512)],
            &[up("alice", SHA512, 4096), up("bob", SHA512, 4096)],
        );
        assert_eq!(
            outcome(&plan),
            vec![
                ("alice".into(), Some(DuplicateResource)),
                ("bob".into(), Some(DuplicateResource))
            ]
        );
        assert!(plan.changes.is_empty());
        // two deletions of one user; a third one changes nothing
        let plan = plan_alter(
            &c,
            &[
                del("alice", SHA256),
                del("alice", SHA512),
                del("alice", SHA256),
            ],
            &[],
        );
        assert_eq!(
            outcome(&plan),
            vec![("alice".into(), Some(DuplicateResource))]
        );
        // a user refused first stays refused with its first reason
        let plan = plan_alter(&c, &[del("zed", SHA256), del("zed", SHA256)], &[]);
        assert_eq!(outcome(&plan), vec![("zed".into(), Some(ResourceNotFound))]);
        // other users go on: one user's refusal does not stop another's change
        let plan = plan_alter(
            &c,
            &[del("bob", SHA512)],
            &[up("carl", SHA256, 4096), up("carl", SHA256, 4096)],
        );
        assert_eq!(
            outcome(&plan),
            vec![
                ("bob".into(), None),
                ("carl".into(), Some(DuplicateResource))
            ]
        );
        c.apply(&plan.changes);
        assert_eq!(c.users().collect::<Vec<_>>(), ["alice"]);
    }

    #[test]
    fn malformed_secrets_are_unacceptable() {
        let c = ScramCredentials::default();
        let mut short = up("a", SHA512, 4096);
        short.salted_password.truncate(32);
        let mut empty_salt = up("b", SHA256, 4096);
        empty_salt.salt.clear();
        let mut long_salt = up("c", SHA256, 4096);
        long_salt.salt = vec![7; MAX_SALT_LEN + 1];
        let mut no_password = up("d", SHA256, 4096);
        no_password.salted_password.clear();
        let plan = plan_alter(&c, &[], &[short, empty_salt, long_salt, no_password]);
        assert!(plan.changes.is_empty());
        assert!(plan
            .results
            .iter()
            .all(|r| matches!(r.error, Some((ResponseError::UnacceptableCredential, _)))));
        // the debug form never shows the salted password
        let debug = format!("{:?}", up("x", SHA256, 4096));
        assert!(debug.contains("redacted") && !debug.contains("salt-salt"));
    }

    #[test]
    fn describe_all_named_missing_and_twice() {
        use ResponseError::*;
        let mut c = with_alice();
        let plan = plan_alter(&c, &[], &[up("bob", SHA512, 4096)]);
        c.apply(&plan.changes);
        let plan = plan_alter(&c, &[], &[up("alice", SHA512, 5000)]);
        c.apply(&plan.changes);
        let all = describe(&c, None);
        assert_eq!(all, describe(&c, Some(&[])));
        assert_eq!(
            all,
            vec![
                Described {
                    user: "alice".into(),
                    result: Ok(vec![
                        (ScramMechanism::Sha256, 8192),
                        (ScramMechanism::Sha512, 5000)
                    ])
                },
                Described {
                    user: "bob".into(),
                    result: Ok(vec![(ScramMechanism::Sha512, 4096)])
                },
            ]
        );
        let named: Vec<String> = ["nobody", "bob", "alice", "nobody", "alice", "nobody"]
            .map(String::from)
            .to_vec();
        let got = describe(&c, Some(&named));
        let codes: Vec<_> = got
            .iter()
            .map(|d| (d.user.as_str(), d.result.as_ref().err().map(|(c, _)| *c)))
            .collect();
        assert_eq!(
            codes,
            [
                ("nobody", Some(DuplicateResource)),
                ("bob", None),
                ("alice", Some(DuplicateResource)),
            ]
        );
        let missing = describe(&c, Some(&["carl".to_string()]));
        assert_eq!(
            missing[0].result,
            Err((
                ResourceNotFound,
                "Attempt to describe a user credential that does not exist: carl".into()
            ))
        );
        assert!(describe(&ScramCredentials::default(), None).is_empty());
    }
}
