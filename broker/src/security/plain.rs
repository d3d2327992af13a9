//! The server side of SASL PLAIN (RFC 4616) as Kafka serves it
//! (`PlainSaslServer`), as pure functions over bytes: no I/O, no broker
//! types.
//!
//! This module owns the parsing of the one client message
//! (`[authzid] NUL authcid NUL passwd`), Kafka's order of checks around a
//! caller-supplied password verifier, and the error messages Kafka clients
//! see. Where the passwords live and how they are compared is the
//! verifier's business (it should take the same time for an unknown user
//! as for a wrong password; [`passwords_equal`] compares in constant time).
//!
//! Differences from Kafka, all refusals of what Kafka would misread: a
//! message with more than two NULs is refused (Kafka silently cuts the
//! password at the third), as is one that is not UTF-8 (Kafka decodes it
//! lossily) or longer than [`MAX_FIELD_LEN`] per field.

use std::fmt;

/// The SASL mechanism name.
pub const MECHANISM: &str = "PLAIN";

/// The longest authzid, username or password accepted, in bytes
/// (RFC 4616 requires at least 255).
pub const MAX_FIELD_LEN: usize = 1024;

/// The longest message accepted: three fields and two NULs.
pub const MAX_MESSAGE_LEN: usize = 3 * MAX_FIELD_LEN + 2;

/// Kafka's message for a wrong password or an unknown user.
pub const INVALID_CREDENTIALS_MESSAGE: &str = "Authentication failed: Invalid username or password";

/// Kafka's message when the authzid is neither empty nor the username.
pub const AUTHORIZATION_ID_MISMATCH_MESSAGE: &str =
    "Authentication failed: Client requested an authorization id that is different from username";

/// Why a PLAIN authentication failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlainError {
    #[error("SASL/PLAIN message of {len} bytes is longer than the limit of {max}")]
    MessageTooLarge { len: usize, max: usize },
    #[error("Invalid SASL/PLAIN response: not UTF-8")]
    NotUtf8,
    #[error("Invalid SASL/PLAIN response: expected 3 tokens, got {0}")]
    WrongTokenCount(usize),
    #[error("Invalid SASL/PLAIN response: a field is longer than {MAX_FIELD_LEN} bytes")]
    FieldTooLong,
    #[error("Authentication failed: username not specified")]
    UsernameNotSpecified,
    #[error("Authentication failed: password not specified")]
    PasswordNotSpecified,
    /// A wrong password or an unknown user: one error on purpose.
    #[error("{INVALID_CREDENTIALS_MESSAGE}")]
    InvalidCredentials,
    #[error("{AUTHORIZATION_ID_MISMATCH_MESSAGE}")]
    AuthorizationIdMismatch,
}

impl PlainError {
    /// The `error_message` a Kafka client sees in SaslAuthenticate. Kafka
    /// passes on its own text for bad credentials and an authzid mismatch
    /// (`SaslAuthenticationException`) and hides everything else behind a
    /// message naming only the phase and the mechanism (`SaslException`).
    pub fn client_message(&self, reauthentication: bool) -> String {
        match self {
            PlainError::InvalidCredentials | PlainError::AuthorizationIdMismatch => {
                self.to_string()
            }
            _ => {
                let phase = if reauthentication {
                    "re-authentication"
                } else {
                    "authentication"
                };
                format!(
                    "Authentication failed during {phase} due to invalid credentials with SASL mechanism {MECHANISM}"
                )
            }
        }
    }
}

/// The client's one message, borrowed from its bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PlainMessage<'a> {
    /// Empty when absent.
    pub authzid: &'a str,
    /// The authcid: who the client says it is.
    pub username: &'a str,
    pub password: &'a str,
}

impl<'a> PlainMessage<'a> {
    /// Splits `[authzid] NUL authcid NUL passwd`. Checks the framing only
    /// (size, UTF-8, exactly two NULs); empty fields are left to
    /// [`authenticate`], which refuses them in Kafka's order.
    pub fn parse(message: &'a [u8]) -> Result<Self, PlainError> {
        if message.len() > MAX_MESSAGE_LEN {
            return Err(PlainError::MessageTooLarge {
                len: message.len(),
                max: MAX_MESSAGE_LEN,
            });
        }
        let text = std::str::from_utf8(message).map_err(|_| PlainError::NotUtf8)?;
        let mut fields = text.split('\0');
        let (Some(authzid), Some(username), Some(password), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(PlainError::WrongTokenCount(text.split('\0').count()));
        };
        if [authzid, username, password]
            .iter()
            .any(|f| f.len() > MAX_FIELD_LEN)
        {
            return Err(PlainError::FieldTooLong);
        }
        Ok(PlainMessage {
            authzid,
            username,
            password,
        })
    }
}

impl fmt::Debug for PlainMessage<'_> {
    /// The password is left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainMessage")
            .field("authzid", &self.authzid)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// One PLAIN authentication, in Kafka's order: parse; refuse an empty
/// username, then an empty password; ask `verify(username, password)`;
/// then refuse an authzid other than the username. Returns the
/// authenticated username (the authorization id). The server's answer on
/// success is the empty token.
pub fn authenticate(
    message: &[u8],
    verify: impl FnOnce(&str, &str) -> bool,
) -> Result<String, PlainError> {
    let message = PlainMessage::parse(message)?;
    if message.username.is_empty() {
        return Err(PlainError::UsernameNotSpecified);
    }
    if message.password.is_empty() {
        return Err(PlainError::PasswordNotSpecified);
    }
    if !verify(message.username, message.password) {
        return Err(PlainError::InvalidCredentials);
    }
    if !message.authzid.is_empty() && message.authzid != message.username {
        return Err(PlainError::AuthorizationIdMismatch);
    }
    Ok(message.username.to_owned())
}

/// Whether two passwords are equal, in time that depends on their lengths
/// only, for verifiers that hold passwords in clear (as Kafka's JAAS
/// `user_<name>="<password>"` options do).
pub fn passwords_equal(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice(user: &str, password: &str) -> bool {
        user == "alice" && passwords_equal(password, "secret")
    }

    #[test]
    fn parses_the_three_fields() {
        let m = PlainMessage::parse(b"admin\0alice\0secret").unwrap();
        assert_eq!(
            (m.authzid, m.username, m.password),
            ("admin", "alice", "secret")
        );
        let m = PlainMessage::parse(b"\0alice\0s\xc3\xa9cret").unwrap();
        assert_eq!((m.authzid, m.username, m.password), ("", "alice", "sécret"));
        // Empty fields are framing-valid; authenticate refuses them.
        let m = PlainMessage::parse(b"\0\0").unwrap();
        assert_eq!((m.authzid, m.username, m.password), ("", "", ""));
        let debug = format!("{m:?}");
        assert!(debug.contains("redacted"));
        let m = PlainMessage::parse(b"\0alice\0secret").unwrap();
        assert!(!format!("{m:?}").contains("secret"));
    }

    #[test]
    fn framing_errors() {
        assert_eq!(
            PlainMessage::parse(b""),
            Err(PlainError::WrongTokenCount(1))
        );
        assert_eq!(
            PlainMessage::parse(b"alice\0secret"),
            Err(PlainError::WrongTokenCount(2))
        );
        assert_eq!(
            PlainMessage::parse(b"\0alice\0sec\0ret"),
            Err(PlainError::WrongTokenCount(4))
        );
        assert_eq!(
            PlainMessage::parse(b"\0alice\0\xff"),
            Err(PlainError::NotUtf8)
        );
        let long = format!("\0{}\0secret", "a".repeat(MAX_FIELD_LEN + 1));
        assert_eq!(
            PlainMessage::parse(long.as_bytes()),
            Err(PlainError::FieldTooLong)
        );
        let ok = format!("\0{}\0secret", "a".repeat(MAX_FIELD_LEN));
        assert!(PlainMessage::parse(ok.as_bytes()).is_ok());
        let huge = vec![b'a'; MAX_MESSAGE_LEN + 1];
        assert_eq!(
            PlainMessage::parse(&huge),
            Err(PlainError::MessageTooLarge {
                len: MAX_MESSAGE_LEN + 1,
                max: MAX_MESSAGE_LEN
            })
        );
    }

    #[test]
    fn authenticates() {
        assert_eq!(
            authenticate(b"\0alice\0secret", alice),
            Ok("alice".to_owned())
        );
        assert_eq!(
            authenticate(b"alice\0alice\0secret", alice),
            Ok("alice".to_owned())
        );
    }

    #[test]
    fn bad_credentials_get_kafkas_message() {
        for message in [&b"\0alice\0wrong"[..], b"\0bob\0secret", b"\0alice\0secre"] {
            let err = authenticate(message, alice).unwrap_err();
            assert_eq!(err, PlainError::InvalidCredentials);
            assert_eq!(
                err.client_message(false),
                "Authentication failed: Invalid username or password"
            );
        }
    }

    #[test]
    fn authzid_must_be_empty_or_the_username() {
        let err = authenticate(b"admin\0alice\0secret", alice).unwrap_err();
        assert_eq!(err, PlainError::AuthorizationIdMismatch);
        assert_eq!(
            err.client_message(false),
            "Authentication failed: Client requested an authorization id that is different from username"
        );
        // Checked after the password, as Kafka does: a wrong password with
        // a foreign authzid is a wrong password.
        assert_eq!(
            authenticate(b"admin\0alice\0wrong", alice),
            Err(PlainError::InvalidCredentials)
        );
    }

    #[test]
    fn empty_fields_are_refused_before_the_verifier() {
        let never = |_: &str, _: &str| -> bool { panic!("verifier called") };
        assert_eq!(
            authenticate(b"\0\0secret", never),
            Err(PlainError::UsernameNotSpecified)
        );
        assert_eq!(
            authenticate(b"\0alice\0", never),
            Err(PlainError::PasswordNotSpecified)
        );
        assert_eq!(
            authenticate(b"alice", never),
            Err(PlainError::WrongTokenCount(1))
        );
    }

    #[test]
    fn other_errors_get_the_generic_message() {
        let generic = "Authentication failed during authentication due to invalid credentials \
                       with SASL mechanism PLAIN";
        for err in [
            PlainError::UsernameNotSpecified,
            PlainError::PasswordNotSpecified,
            PlainError::WrongTokenCount(4),
            PlainError::NotUtf8,
            PlainError::FieldTooLong,
        ] {
            assert_eq!(err.client_message(false), generic);
        }
        assert_eq!(
            PlainError::NotUtf8.client_message(true),
            "Authentication failed during re-authentication due to invalid credentials \
             with SASL mechanism PLAIN"
        );
    }

    #[test]
    fn passwords_equal_compares() {
        assert!(passwords_equal("secret", "secret"));
        assert!(!passwords_equal("secret", "secreT"));
        assert!(!passwords_equal("secret", "secrets"));
        assert!(passwords_equal("", ""));
    }
}
