//! Password authentication as Postgres does it, independent of the wire
//! library: the secrets stored for a role (`SCRAM-SHA-256$…` or `md5…`, the
//! formats of `pg_authid.rolpassword`, so a secret psql's `\password`
//! computes is stored as sent) and the server's side of the SCRAM-SHA-256
//! and md5 exchanges. The server module drives the exchanges over pgwire;
//! the engine stores the secrets.
//!
//! We verify SCRAM ourselves rather than with pgwire's `ScramAuth`: that
//! one needs the salted password itself (which logs in by itself if the
//! data directory is stolen) and one iteration count for every role, where
//! Postgres stores only StoredKey and ServerKey per role.

mod md5;
mod scram;
mod secret;

pub use md5::{md5_response_matches, Md5Challenge};
pub use scram::{ScramExchange, ScramFailure};
pub use secret::{PasswordEncryption, PasswordSecret, ScramSecret, SCRAM_ITERATIONS};

/// Compares two byte strings in time that depends only on their lengths.
fn same_bytes(left: &[u8], right: &[u8]) -> bool {
    left.len() == right.len()
        && left
            .iter()
            .zip(right)
            .fold(0u8, |difference, (a, b)| difference | (a ^ b))
            == 0
}

/// Random bytes from the operating system; `None` only when the kernel
/// has no random source, and then no salt or nonce may be made up.
fn random_bytes<const N: usize>() -> Option<[u8; N]> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new().fill(&mut bytes).ok()?;
    Some(bytes)
}
