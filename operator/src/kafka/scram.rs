//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) on
//! the admin connection, and the client-side half of a SCRAM credential:
//! Kafka's admin client never sends a password, it sends a random salt and
//! `SaltedPassword = Hi(password, salt, iterations)` (RFC 5802: PBKDF2 with
//! HMAC of the mechanism's hash), from which the broker derives StoredKey
//! and ServerKey — the same definition as the broker's
//! `ScramMechanism::salted_password`.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;
use sha2::{Sha256, Sha512};

use super::{AdminClient, KafkaError};

/// RESOURCE_NOT_FOUND: DescribeUserScramCredentials' answer for a user
/// without credentials.
const RESOURCE_NOT_FOUND: i16 = 91;

/// Iterations the operator uses (Kafka's minimum, 4096, as `kafka-configs`
/// uses by default).
pub const ITERATIONS: u32 = 4096;

/// A SCRAM mechanism, with Kafka's wire code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256 (code 1).
    Sha256,
    /// SCRAM-SHA-512 (code 2).
    Sha512,
}

impl ScramMechanism {
    /// Kafka's wire code.
    pub fn code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// From a wire code.
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// Hi(password, salt, iterations): PBKDF2-HMAC with the mechanism's
    /// hash, as long as the hash's output.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out
            }
            ScramMechanism::Sha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }
}

/// One credential to set: what AlterUserScramCredentials carries.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramUpsertion {
    /// User name.
    pub user: String,
    /// Mechanism.
    pub mechanism: ScramMechanism,
    /// Iterations.
    pub iterations: u32,
    /// Random salt.
    pub salt: Vec<u8>,
    /// Hi(password, salt, iterations).
    pub salted_password: Vec<u8>,
}

// never print key material
impl std::fmt::Debug for ScramUpsertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramUpsertion")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// One credential to remove.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScramDeletion {
    /// User name.
    pub user: String,
    /// Mechanism.
    pub mechanism: ScramMechanism,
}

/// The mechanisms a user has credentials for: mechanism → iterations.
pub type UserMechanisms = BTreeMap<ScramMechanism, i32>;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

impl AdminClient {
    /// The SCRAM mechanisms `user` has credentials for (empty when none).
    pub async fn describe_user_scram_credentials(
        &mut self,
        user: &str,
    ) -> Result<UserMechanisms, KafkaError> {
        let req = DescribeUserScramCredentialsRequest::default()
            .with_users(Some(vec![UserName::default().with_name(s(user))]));
        let resp = self.call(req, "DescribeUserScramCredentials").await?;
        if resp.error_code != 0 {
            return Err(KafkaError::broker(
                "DescribeUserScramCredentials",
                resp.error_code,
                resp.error_message.map(|m| m.to_string()),
            ));
        }
        let mut out = UserMechanisms::new();
        for r in resp.results {
            if r.user.as_str() != user || r.error_code == RESOURCE_NOT_FOUND {
                continue;
            }
            if r.error_code != 0 {
                return Err(KafkaError::broker(
                    "DescribeUserScramCredentials",
                    r.error_code,
                    r.error_message.map(|m| m.to_string()),
                ));
            }
            for c in r.credential_infos {
                if let Some(m) = ScramMechanism::from_code(c.mechanism) {
                    out.insert(m, c.iterations);
                }
            }
        }
        Ok(out)
    }

    /// Applies upsertions, then deletions, one request each: Kafka refuses
    /// a request that names a user twice (DUPLICATE_RESOURCE), and setting
    /// before removing never leaves a user without a credential.
    pub async fn alter_user_scram_credentials(
        &mut self,
        deletions: &[ScramDeletion],
        upsertions: &[ScramUpsertion],
    ) -> Result<(), KafkaError> {
        for u in upsertions {
            let req = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                ScramCredentialUpsertion::default()
                    .with_name(s(&u.user))
                    .with_mechanism(u.mechanism.code())
                    .with_iterations(u.iterations as i32)
                    .with_salt(Bytes::from(u.salt.clone()))
                    .with_salted_password(Bytes::from(u.salted_password.clone())),
            ]);
            self.alter_scram(req).await?;
        }
        for d in deletions {
            let req = AlterUserScramCredentialsRequest::default().with_deletions(vec![
                ScramCredentialDeletion::default()
                    .with_name(s(&d.user))
                    .with_mechanism(d.mechanism.code()),
            ]);
            self.alter_scram(req).await?;
        }
        Ok(())
    }

    async fn alter_scram(
        &mut self,
        req: AlterUserScramCredentialsRequest,
    ) -> Result<(), KafkaError> {
        let resp = self.call(req, "AlterUserScramCredentials").await?;
        match resp.results.into_iter().find(|r| r.error_code != 0) {
            None => Ok(()),
            Some(r) => Err(KafkaError::broker(
                "AlterUserScramCredentials",
                r.error_code,
                r.error_message.map(|m| m.to_string()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salted_password_is_pbkdf2_of_the_mechanism_hash() {
        // RFC 7677's SCRAM-SHA-256 example: user "user", password "pencil",
        // salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 iterations; its ClientProof
        // follows from this SaltedPassword.
        let salt = [
            0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36,
            0xfa, 0x81,
        ];
        let sp = ScramMechanism::Sha256.salted_password(b"pencil", &salt, 4096);
        assert_eq!(sp.len(), 32);
        assert_eq!(
            ScramMechanism::Sha512
                .salted_password(b"pencil", &salt, 4096)
                .len(),
            64
        );
        // the broker's own definition (it derives StoredKey and ServerKey
        // from what we send, so the two must agree byte for byte)
        use moldau_broker::security::scram::ScramMechanism as Broker;
        for (ours, theirs) in [
            (ScramMechanism::Sha256, Broker::Sha256),
            (ScramMechanism::Sha512, Broker::Sha512),
        ] {
            assert_eq!(ours.code(), theirs.id());
            assert_eq!(ours.name(), theirs.name());
            assert_eq!(
                ours.salted_password(b"pencil", &salt, 4096),
                theirs.salted_password(b"pencil", &salt, 4096)
            );
        }
        assert_ne!(
            sp,
            ScramMechanism::Sha256.salted_password(b"pencil", &[0u8; 16], 4096)
        );
    }

    #[test]
    fn mechanism_codes_are_kafkas() {
        assert_eq!(ScramMechanism::Sha256.code(), 1);
        assert_eq!(ScramMechanism::Sha512.code(), 2);
        assert_eq!(ScramMechanism::from_code(2), Some(ScramMechanism::Sha512));
        assert_eq!(ScramMechanism::from_code(0), None);
    }
}
