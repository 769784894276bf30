//! The secret stored for a role's password, in Postgres's formats:
//! `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64) or
//! `md5<hex of md5(password || user name)>`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::{digest, hmac, pbkdf2};

/// Postgres's default, and the least RFC 7677 allows.
pub const SCRAM_ITERATIONS: u32 = 4096;

const SCRAM_PREFIX: &str = "SCRAM-SHA-256$";
const MD5_PREFIX: &str = "md5";

/// How a password given in cleartext is stored (`password_encryption`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordEncryption {
    Scram,
    Md5,
}

impl PasswordEncryption {
    pub fn parse(text: &str) -> Option<PasswordEncryption> {
        match text.to_ascii_lowercase().as_str() {
            "scram-sha-256" => Some(PasswordEncryption::Scram),
            "md5" => Some(PasswordEncryption::Md5),
            _ => None,
        }
    }
}

/// A role's password as stored: never the password itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordSecret {
    Scram(ScramSecret),
    /// `md5` and 32 lower-case hex digits.
    Md5(String),
}

/// What the server needs to check a SCRAM-SHA-256 proof (RFC 5802): the
/// salted password itself is not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramSecret {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl PasswordSecret {
    /// The secret for `password` of role `user` as written in CREATE or
    /// ALTER ROLE: a secret in Postgres's formats is kept as it is (psql's
    /// `\password` and pg_dump send those); anything else is a password,
    /// hashed as `encryption` says (SCRAM with a new random salt). `None`
    /// when the system has no random source for the salt.
    pub fn from_statement(
        user: &str,
        password: &str,
        encryption: PasswordEncryption,
    ) -> Option<PasswordSecret> {
        if let Some(secret) = PasswordSecret::parse(password) {
            return Some(secret);
        }
        if encryption == PasswordEncryption::Md5 {
            return Some(PasswordSecret::md5(user, password));
        }
        let salt: [u8; 16] = super::random_bytes()?;
        Some(PasswordSecret::Scram(ScramSecret::new(
            password,
            &salt,
            SCRAM_ITERATIONS,
        )))
    }

    /// Reads a stored secret; `None` if `text` is not one.
    pub fn parse(text: &str) -> Option<PasswordSecret> {
        if let Some(hex) = text.strip_prefix(MD5_PREFIX) {
            let is_hex = hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit());
            return is_hex.then(|| PasswordSecret::Md5(text.to_ascii_lowercase()));
        }
        ScramSecret::parse(text.strip_prefix(SCRAM_PREFIX)?).map(PasswordSecret::Scram)
    }

    /// The form `parse` reads back.
    pub fn to_stored(&self) -> String {
        match self {
            PasswordSecret::Md5(text) => text.clone(),
            PasswordSecret::Scram(secret) => format!(
                "{SCRAM_PREFIX}{}:{}${}:{}",
                secret.iterations,
                STANDARD.encode(&secret.salt),
                STANDARD.encode(&secret.stored_key),
                STANDARD.encode(&secret.server_key)
            ),
        }
    }

    /// Whether `password` is the one behind this secret (for `user`, which
    /// md5 secrets are salted with).
    pub fn matches_password(&self, user: &str, password: &str) -> bool {
        match self {
            PasswordSecret::Md5(_) => *self == PasswordSecret::md5(user, password),
            PasswordSecret::Scram(secret) => {
                let again = ScramSecret::new(password, &secret.salt, secret.iterations);
                super::same_bytes(&again.stored_key, &secret.stored_key)
            }
        }
    }

    /// The md5 secret Postgres stores for `password` of role `user`.
    pub fn md5(user: &str, password: &str) -> PasswordSecret {
        let digest = ::md5::compute([password.as_bytes(), user.as_bytes()].concat());
        PasswordSecret::Md5(format!("{MD5_PREFIX}{digest:x}"))
    }
}

impl ScramSecret {
    /// RFC 5802: SaltedPassword := Hi(Normalize(password), salt, i);
    /// StoredKey := H(HMAC(SaltedPassword, "Client Key"));
    /// ServerKey := HMAC(SaltedPassword, "Server Key").
    pub fn new(password: &str, salt: &[u8], iterations: u32) -> ScramSecret {
        // As Postgres: a password SASLprep rejects is used unnormalized.
        let normalized =
            stringprep::saslprep(password).unwrap_or(std::borrow::Cow::Borrowed(password));
        let mut salted = [0u8; 32];
        let rounds =
            std::num::NonZeroU32::new(iterations.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            rounds,
            salt,
            normalized.as_bytes(),
            &mut salted,
        );
        let client_key = hmac_sha256(&salted, b"Client Key");
        ScramSecret {
            iterations: rounds.get(),
            salt: salt.to_vec(),
            stored_key: digest::digest(&digest::SHA256, &client_key)
                .as_ref()
                .to_vec(),
            server_key: hmac_sha256(&salted, b"Server Key"),
        }
    }

    /// `<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    fn parse(text: &str) -> Option<ScramSecret> {
        let (parameters, keys) = text.split_once('$')?;
        let (iterations, salt) = parameters.split_once(':')?;
        let (stored_key, server_key) = keys.split_once(':')?;
        let secret = ScramSecret {
            iterations: iterations.parse().ok().filter(|&i| i > 0)?,
            salt: STANDARD.decode(salt).ok()?,
            stored_key: STANDARD.decode(stored_key).ok()?,
            server_key: STANDARD.decode(server_key).ok()?,
        };
        let sized = secret.stored_key.len() == 32 && secret.server_key.len() == 32;
        (sized && !secret.salt.is_empty()).then_some(secret)
    }
}

pub(super) fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, message).as_ref().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scram_secret_is_written_and_read_back_unchanged() {
        let secret = PasswordSecret::Scram(ScramSecret::new("weir", b"saltsaltsaltsalt", 4096));
        let stored = secret.to_stored();
        assert!(stored.starts_with("SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0c2FsdA==$"));
        assert_eq!(PasswordSecret::parse(&stored), Some(secret.clone()));
        assert!(secret.matches_password("anyone", "weir"));
        assert!(!secret.matches_password("anyone", "Weir"));
    }

    #[test]
    fn md5_secrets_are_postgres_md5_of_password_and_user() {
        // Postgres: SELECT 'md5' || md5('secret' || 'alice').
        let secret = PasswordSecret::md5("alice", "secret");
        let PasswordSecret::Md5(text) = &secret else {
            panic!("md5 expected")
        };
        let expected = format!("md5{:x}", ::md5::compute(b"secretalice"));
        assert_eq!(text, &expected);
        assert_eq!(PasswordSecret::parse(text), Some(secret));
    }

    #[test]
    fn text_that_is_not_a_secret_is_a_password() {
        for text in [
            "md5",
            "md5xyz",
            "SCRAM-SHA-256$x",
            "SCRAM-SHA-256$4096:$a:b",
            "hunter2",
        ] {
            assert_eq!(PasswordSecret::parse(text), None, "{text}");
        }
        let scram =
            |password| PasswordSecret::from_statement("u", password, PasswordEncryption::Scram);
        let secret = scram("hunter2").unwrap();
        assert!(matches!(
            secret,
            PasswordSecret::Scram(ScramSecret {
                iterations: 4096,
                ..
            })
        ));
        assert_ne!(secret, scram("hunter2").unwrap(), "new salt each time");
        let md5 = PasswordSecret::from_statement("u", "hunter2", PasswordEncryption::Md5);
        assert_eq!(md5, Some(PasswordSecret::md5("u", "hunter2")));
    }
}
