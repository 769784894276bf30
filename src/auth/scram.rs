//! The server's side of SCRAM-SHA-256 (RFC 5802, RFC 7677) as Postgres
//! runs it: the user name in the client's message is ignored (the startup
//! message names the role) and channel binding is not offered, so a client
//! may send `n` or `y` but not `p`.
//!
//! A role that does not exist or has no password still gets a full
//! exchange, with a salt derived from its name and keys nobody knows, so a
//! client cannot tell which roles exist (Postgres's "mock" authentication).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::digest;

use super::secret::{hmac_sha256, ScramSecret};
use super::SCRAM_ITERATIONS;

/// Why an exchange failed: the client's message was malformed (08P01) or
/// its proof was wrong (28P01).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramFailure {
    Malformed(String),
    WrongProof,
    /// The system has no random source for the server's nonce.
    NoRandomness,
}

/// An exchange after the server's first message, waiting for the client's
/// final one.
#[derive(Debug)]
pub struct ScramExchange {
    secret: ScramSecret,
    /// False for a mock exchange, which fails whatever the client proves.
    genuine: bool,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ScramExchange {
    /// Reads the client's first message and returns the exchange and the
    /// server's first message. `secret` is `None` for a mock exchange;
    /// `role` seeds its salt.
    pub fn start(
        secret: Option<&ScramSecret>,
        role: &str,
        client_first: &[u8],
    ) -> Result<(ScramExchange, String), ScramFailure> {
        let server_nonce: [u8; 18] = super::random_bytes().ok_or(ScramFailure::NoRandomness)?;
        ScramExchange::start_with_nonce(secret, role, client_first, &STANDARD.encode(server_nonce))
    }

    fn start_with_nonce(
        secret: Option<&ScramSecret>,
        role: &str,
        client_first: &[u8],
        server_nonce: &str,
    ) -> Result<(ScramExchange, String), ScramFailure> {
        let text = std::str::from_utf8(client_first)
            .map_err(|_| malformed("the client's first message is not UTF-8"))?;
        let (gs2_header, bare) = split_gs2_header(text)?;
        let client_nonce = attribute(bare, 'r')
            .filter(|nonce| {
                !nonce.is_empty() && nonce.bytes().all(|b| b.is_ascii_graphic() && b != b',')
            })
            .ok_or_else(|| malformed("the client's first message has no nonce (r=)"))?;
        if bare.starts_with("m=") {
            return Err(malformed("SCRAM extensions (m=) are not supported"));
        }
        let (secret, genuine) = match secret {
            Some(secret) => (secret.clone(), true),
            None => (mock_secret(role), false),
        };
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(&secret.salt),
            secret.iterations
        );
        let exchange = ScramExchange {
            secret,
            genuine,
            gs2_header: gs2_header.to_string(),
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
        };
        Ok((exchange, server_first))
    }

    /// Checks the client's final message; on success returns the server's
    /// final message (`v=…`), which proves the server knew the secret.
    pub fn finish(&self, client_final: &[u8]) -> Result<String, ScramFailure> {
        let text = std::str::from_utf8(client_final)
            .map_err(|_| malformed("the client's final message is not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| malformed("the client's final message has no proof (p=)"))?;
        let binding = attribute(without_proof, 'c')
            .and_then(|binding| STANDARD.decode(binding).ok())
            .ok_or_else(|| malformed("the client's final message has no channel binding (c=)"))?;
        if binding != self.gs2_header.as_bytes() {
            return Err(malformed(
                "the channel binding does not match the first message",
            ));
        }
        if attribute(without_proof, 'r') != Some(self.nonce.as_str()) {
            return Err(malformed("the nonce does not match the server's"));
        }
        let proof = STANDARD
            .decode(proof)
            .map_err(|_| malformed("the proof is not base64"))?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let client_signature = hmac_sha256(&self.secret.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramFailure::WrongProof);
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let stored_key = digest::digest(&digest::SHA256, &client_key);
        if !super::same_bytes(stored_key.as_ref(), &self.secret.stored_key) || !self.genuine {
            return Err(ScramFailure::WrongProof);
        }
        let server_signature = hmac_sha256(&self.secret.server_key, auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(server_signature)))
    }
}

fn malformed(message: &str) -> ScramFailure {
    ScramFailure::Malformed(message.to_string())
}

/// `n,,` or `y,,` (optionally with `a=authzid`), then the bare message.
fn split_gs2_header(text: &str) -> Result<(&str, &str), ScramFailure> {
    let mut parts = text.splitn(3, ',');
    let flag = parts.next().unwrap_or_default();
    let authorization = parts.next();
    let bare = parts.next();
    match (flag, authorization, bare) {
        ("n" | "y", Some(authorization), Some(bare))
            if authorization.is_empty() || authorization.starts_with("a=") =>
        {
            Ok((&text[..text.len() - bare.len()], bare))
        }
        (flag, _, _) if flag.starts_with("p=") => Err(malformed(
            "channel binding (SCRAM-SHA-256-PLUS) was not offered",
        )),
        _ => Err(malformed("the client's first message has no GS2 header")),
    }
}

/// The value of attribute `name` in a comma-separated SCRAM message.
fn attribute(message: &str, name: char) -> Option<&str> {
    message.split(',').find_map(|part| {
        let mut chars = part.chars();
        (chars.next() == Some(name) && chars.next() == Some('=')).then(|| &part[2..])
    })
}

/// A secret for a role that cannot log in with a password: the salt is
/// the same on every attempt (derived from the name with a key made once
/// per process), so retries do not reveal that it is made up.
fn mock_secret(role: &str) -> ScramSecret {
    static MOCK_KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    let key = MOCK_KEY.get_or_init(|| super::random_bytes().unwrap_or([7; 32]));
    let salt = hmac_sha256(key, role.as_bytes());
    let unknown: [u8; 32] = super::random_bytes().unwrap_or([0; 32]);
    ScramSecret {
        iterations: SCRAM_ITERATIONS,
        salt: salt[..16].to_vec(),
        stored_key: unknown.to_vec(),
        server_key: unknown.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677, section 3: user "user", password "pencil".
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn pencil() -> ScramSecret {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        ScramSecret::new("pencil", &salt, 4096)
    }

    fn start(
        secret: Option<&ScramSecret>,
        first: &str,
    ) -> Result<(ScramExchange, String), ScramFailure> {
        ScramExchange::start_with_nonce(secret, "user", first.as_bytes(), SERVER_NONCE)
    }

    #[test]
    fn the_rfc_7677_exchange_succeeds_with_its_server_messages() {
        let (exchange, server_first) = start(Some(&pencil()), CLIENT_FIRST).unwrap();
        assert_eq!(server_first, SERVER_FIRST);
        assert_eq!(
            exchange.finish(CLIENT_FINAL.as_bytes()).unwrap(),
            SERVER_FINAL
        );
    }

    #[test]
    fn another_password_fails_the_proof() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let other = ScramSecret::new("pencil2", &salt, 4096);
        let (exchange, _) = start(Some(&other), CLIENT_FIRST).unwrap();
        assert_eq!(
            exchange.finish(CLIENT_FINAL.as_bytes()),
            Err(ScramFailure::WrongProof)
        );
    }

    #[test]
    fn a_mock_exchange_fails_and_keeps_its_salt_across_attempts() {
        let (exchange, first) = start(None, CLIENT_FIRST).unwrap();
        let (_, again) = start(None, CLIENT_FIRST).unwrap();
        assert_eq!(first, again);
        assert_eq!(
            exchange.finish(CLIENT_FINAL.as_bytes()),
            Err(ScramFailure::WrongProof)
        );
    }

    #[test]
    fn malformed_messages_are_refused_not_panicked_on() {
        let client_firsts = [
            "",
            "n",
            "n,",
            "x,,n=user,r=abc",
            "p=tls-server-end-point,,n=u,r=abc",
            "n,,n=user",
            "n,,n=user,r=",
            "n,,m=ext,n=user,r=abc",
            "\u{0}\u{ff}",
        ];
        for first in client_firsts {
            assert!(
                matches!(
                    start(Some(&pencil()), first),
                    Err(ScramFailure::Malformed(_))
                ),
                "{first:?}"
            );
        }
        let (exchange, _) = start(Some(&pencil()), CLIENT_FIRST).unwrap();
        let client_finals = [
            "",
            "c=biws",
            "c=biws,r=wrong,p=AAAA",
            "c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!",
        ];
        for last in client_finals {
            assert!(
                matches!(
                    exchange.finish(last.as_bytes()),
                    Err(ScramFailure::Malformed(_))
                ),
                "{last:?}"
            );
        }
        let short_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA";
        assert_eq!(
            exchange.finish(short_proof.as_bytes()),
            Err(ScramFailure::WrongProof)
        );
    }

    #[test]
    fn a_client_that_could_bind_but_was_not_offered_it_succeeds() {
        let first = CLIENT_FIRST.replacen('n', "y", 1);
        let (exchange, _) = start(Some(&pencil()), &first).unwrap();
        // c= is base64 of "y,,"; the proof covers it, so a new one is needed.
        let final_without_proof = "c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let proof = client_proof("pencil", &exchange, final_without_proof);
        let message = format!("{final_without_proof},p={proof}");
        assert!(exchange.finish(message.as_bytes()).is_ok());
    }

    /// The client's side, written from RFC 5802 for this test.
    fn client_proof(password: &str, exchange: &ScramExchange, without_proof: &str) -> String {
        let salt = &exchange.secret.salt;
        let mut salted = [0u8; 32];
        ring::pbkdf2::derive(
            ring::pbkdf2::PBKDF2_HMAC_SHA256,
            std::num::NonZeroU32::new(4096).unwrap(),
            salt,
            password.as_bytes(),
            &mut salted,
        );
        let client_key = hmac_sha256(&salted, b"Client Key");
        let stored_key = digest::digest(&digest::SHA256, &client_key);
        let auth_message = format!(
            "{},{},{without_proof}",
            exchange.client_first_bare, exchange.server_first
        );
        let signature = hmac_sha256(stored_key.as_ref(), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        STANDARD.encode(proof)
    }
}
