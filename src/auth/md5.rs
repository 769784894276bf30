//! The md5 exchange, for clients too old for SCRAM: the server sends a
//! random 4-byte salt and the client answers
//! `md5` || hex(md5(hex(md5(password || user)) || salt)).

use super::PasswordSecret;

/// The salt one md5 exchange sent.
#[derive(Debug, Clone, Copy)]
pub struct Md5Challenge {
    pub salt: [u8; 4],
}

impl Md5Challenge {
    /// `None` when the system has no random source.
    pub fn new() -> Option<Md5Challenge> {
        Some(Md5Challenge {
            salt: super::random_bytes()?,
        })
    }
}

/// Whether `response` proves knowledge of the password behind `secret`.
/// A role whose secret is SCRAM cannot log in with md5 (its md5 hash is
/// not stored), as in Postgres.
pub fn md5_response_matches(
    secret: &PasswordSecret,
    challenge: Md5Challenge,
    response: &[u8],
) -> bool {
    let PasswordSecret::Md5(stored) = secret else {
        return false;
    };
    let Some(hex) = stored.strip_prefix("md5") else {
        return false;
    };
    let expected = format!(
        "md5{:x}",
        ::md5::compute([hex.as_bytes(), &challenge.salt].concat())
    );
    // The client's message may end in the C string's NUL.
    let response = response.strip_suffix(&[0]).unwrap_or(response);
    super::same_bytes(expected.as_bytes(), response)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What libpq sends (fe-auth.c): md5 of the stored hash's hex and the salt.
    fn client_response(user: &str, password: &str, salt: [u8; 4]) -> String {
        let inner = format!("{:x}", ::md5::compute(format!("{password}{user}")));
        format!(
            "md5{:x}",
            ::md5::compute([inner.as_bytes(), &salt].concat())
        )
    }

    #[test]
    fn the_right_password_matches_and_a_wrong_one_does_not() {
        let secret = PasswordSecret::md5("alice", "secret");
        let challenge = Md5Challenge { salt: [1, 2, 3, 4] };
        let right = client_response("alice", "secret", challenge.salt);
        assert!(md5_response_matches(&secret, challenge, right.as_bytes()));
        let wrong = client_response("alice", "Secret", challenge.salt);
        assert!(!md5_response_matches(&secret, challenge, wrong.as_bytes()));
        let other_salt = client_response("alice", "secret", [4, 3, 2, 1]);
        assert!(!md5_response_matches(
            &secret,
            challenge,
            other_salt.as_bytes()
        ));
    }

    #[test]
    fn a_scram_secret_never_matches_an_md5_response() {
        let encryption = super::super::PasswordEncryption::Scram;
        let secret = PasswordSecret::from_statement("alice", "secret", encryption).unwrap();
        let challenge = Md5Challenge { salt: [0; 4] };
        let response = client_response("alice", "secret", challenge.salt);
        assert!(!md5_response_matches(
            &secret,
            challenge,
            response.as_bytes()
        ));
    }
}
