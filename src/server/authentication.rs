//! Who may connect, and the password exchanges that decide it: loopback
//! clients are trusted by default; every other client proves its password
//! with SCRAM-SHA-256, or with md5 for a role whose stored secret is md5
//! (as Postgres's `md5` method does). Also refuses clients over the
//! connection limit, without a user name, or without TLS when it is
//! required, before any password is asked for.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    DefaultServerParameterProvider, StartupHandler,
};
use pgwire::api::{
    ClientInfo, ConnectionManager, PgWireConnectionState, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::Notify;

use super::cancel::CommitGates;
use super::waiting_room::Ticket;
use crate::auth::{
    md5_response_matches, Md5Challenge, PasswordSecret, ScramExchange, ScramFailure,
};
use crate::engine::connections::{Counted, Refusal};
use crate::engine::Engine;
use crate::error::sqlstate;
use crate::session::{CommitGate, Session};

/// How the server decides who may connect; `main` builds it from flags.
#[derive(Clone, Default)]
pub struct Security {
    /// Clients on a loopback address log in without a password.
    pub trust_loopback: bool,
    /// Every client logs in without a password (`--insecure-trust-all`).
    pub trust_everyone: bool,
    /// Refuse clients that did not negotiate TLS.
    pub require_tls: bool,
    pub tls: Option<pgwire::tokio::TlsAcceptor>,
    /// A connection that has not logged in by then is closed
    /// (`--authentication-timeout-ms`).
    pub authentication_timeout: std::time::Duration,
}

impl Security {
    fn trusts(&self, peer: SocketAddr) -> bool {
        self.trust_everyone || (self.trust_loopback && peer.ip().to_canonical().is_loopback())
    }
}

const SCRAM_MECHANISM: &str = "SCRAM-SHA-256";

/// One pid counter for the whole server, so cancel keys do not repeat.
static PID_GENERATOR: LazyLock<RandomPidSecretKeyGenerator> =
    LazyLock::new(RandomPidSecretKeyGenerator::default);

/// Where a connection's password exchange stands.
enum Exchange {
    NotStarted,
    /// SASL offered; waiting for the client's first message.
    ScramOffered(Option<crate::auth::ScramSecret>),
    ScramContinued(Box<ScramExchange>),
    Md5Sent(Option<PasswordSecret>, Md5Challenge),
}

/// The startup handler of one connection.
pub struct Startup {
    pub(super) engine: Arc<Engine>,
    pub(super) security: Arc<Security>,
    pub(super) connections: Arc<ConnectionManager>,
    pub(super) gates: Arc<CommitGates>,
    pub(super) gate: Arc<CommitGate>,
    /// Learns who logged in.
    pub(super) session: Arc<Session>,
    pub(super) admission: Admission,
    exchange: Mutex<Exchange>,
}

/// A connection's place among the server's connections: in the waiting
/// room (server::waiting_room) from accept until its role logs in, then in
/// a logged-in slot (engine::connections); `logged_in` tells the
/// authentication timeout (server::spawn_connection) it need not fire.
pub struct Admission {
    ticket: Mutex<Option<Ticket>>,
    logged_in: Arc<Notify>,
}

/// Held in the connection's extensions while it is logged in.
struct LoggedIn(#[allow(dead_code)] Counted);

impl Admission {
    /// A socket just accepted, with its place in the waiting room.
    pub(super) fn new(ticket: Ticket, logged_in: Arc<Notify>) -> Self {
        Admission {
            ticket: Mutex::new(Some(ticket)),
            logged_in,
        }
    }

    /// Takes a logged-in slot, as Postgres does: the last
    /// `--superuser-reserved-connections` only for superusers.
    fn log_in(&self, engine: &Engine, superuser: bool) -> PgWireResult<LoggedIn> {
        let counted = engine.connections().log_in(superuser).map_err(|refusal| {
            let message = match refusal {
                Refusal::TooMany => "sorry, too many clients already",
                Refusal::ReservedForSuperusers => {
                    "remaining connection slots are reserved for roles with the SUPERUSER attribute"
                }
            };
            fatal(sqlstate::TOO_MANY_CONNECTIONS, message)
        })?;
        self.ticket.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.logged_in.notify_one();
        Ok(LoggedIn(counted))
    }
}

impl Startup {
    pub(super) fn new(
        engine: Arc<Engine>,
        security: Arc<Security>,
        (connections, gates): (Arc<ConnectionManager>, Arc<CommitGates>),
        session: Arc<Session>,
        admission: Admission,
    ) -> Self {
        Startup {
            engine,
            security,
            connections,
            gates,
            gate: session.commit_gate(),
            session,
            admission,
            exchange: Mutex::new(Exchange::NotStarted),
        }
    }

    fn exchange(&self) -> std::sync::MutexGuard<'_, Exchange> {
        self.exchange.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn user<C: ClientInfo>(client: &C) -> String {
    client
        .metadata()
        .get(pgwire::api::METADATA_USER)
        .cloned()
        .unwrap_or_default()
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                self.start(client).await
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                self.on_password_message(client, message).await
            }
            _ => Ok(()),
        }
    }
}

impl Startup {
    /// After the startup message: refuses, admits, or asks for a password.
    async fn start<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.check_admission(client)?;
        let user = user(client);
        let role = self.engine.roles().get(&user);
        if self.security.trusts(client.socket_addr()) {
            return self.admit(client, &user, true).await;
        }
        let secret = role
            .and_then(|role| role.password)
            .and_then(|stored| PasswordSecret::parse(&stored));
        client.set_state(PgWireConnectionState::AuthenticationInProgress);
        let (next, request) = match secret {
            Some(PasswordSecret::Md5(stored)) => {
                let challenge = Md5Challenge::new().ok_or_else(no_randomness)?;
                let request = Authentication::MD5Password(challenge.salt.to_vec());
                (
                    Exchange::Md5Sent(Some(PasswordSecret::Md5(stored)), challenge),
                    request,
                )
            }
            Some(PasswordSecret::Scram(secret)) => (
                Exchange::ScramOffered(Some(secret)),
                Authentication::SASL(vec![SCRAM_MECHANISM.to_string()]),
            ),
            // A role without a password, or none at all, still goes
            // through SCRAM (and fails), so clients cannot tell which.
            None => (
                Exchange::ScramOffered(None),
                Authentication::SASL(vec![SCRAM_MECHANISM.to_string()]),
            ),
        };
        *self.exchange() = next;
        client
            .send(PgWireBackendMessage::Authentication(request))
            .await?;
        Ok(())
    }

    fn check_admission<C: ClientInfo>(&self, client: &C) -> PgWireResult<()> {
        if self.security.require_tls && !client.is_secure() {
            return Err(fatal_with_hint(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                "connection without TLS refused: this server requires TLS",
                "Connect with sslmode=require (or verify-full).",
            ));
        }
        if user(client).is_empty() {
            return Err(fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                "no PostgreSQL user name specified in startup packet",
            ));
        }
        Ok(())
    }

    async fn on_password_message<C>(
        &self,
        client: &mut C,
        message: PasswordMessageFamily,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let user = user(client);
        let state = std::mem::replace(&mut *self.exchange(), Exchange::NotStarted);
        match state {
            Exchange::NotStarted => Err(fatal(
                sqlstate::PROTOCOL_VIOLATION,
                "unexpected password message",
            )),
            Exchange::Md5Sent(secret, challenge) => {
                let response = message.into_password()?;
                let matches = secret.is_some_and(|secret| {
                    md5_response_matches(&secret, challenge, response.password.as_bytes())
                });
                match matches {
                    true => self.admit(client, &user, false).await,
                    false => Err(self.failed(client, &user)),
                }
            }
            Exchange::ScramOffered(secret) => {
                let initial = message.into_sasl_initial_response()?;
                if initial.auth_method != SCRAM_MECHANISM {
                    return Err(fatal(
                        sqlstate::PROTOCOL_VIOLATION,
                        &format!("SASL mechanism {} was not offered", initial.auth_method),
                    ));
                }
                let data = initial.data.unwrap_or_default();
                let (exchange, server_first) = ScramExchange::start(secret.as_ref(), &user, &data)
                    .map_err(|failure| self.scram_failed(client, &user, failure))?;
                *self.exchange() = Exchange::ScramContinued(Box::new(exchange));
                let reply = Authentication::SASLContinue(server_first.into_bytes().into());
                client
                    .send(PgWireBackendMessage::Authentication(reply))
                    .await?;
                Ok(())
            }
            Exchange::ScramContinued(exchange) => {
                let response = message.into_sasl_response()?;
                let server_final = exchange
                    .finish(&response.data)
                    .map_err(|failure| self.scram_failed(client, &user, failure))?;
                let reply = Authentication::SASLFinal(server_final.into_bytes().into());
                client
                    .feed(PgWireBackendMessage::Authentication(reply))
                    .await?;
                self.admit(client, &user, false).await
            }
        }
    }

    /// Registers the connection for cancel requests, records who logged
    /// in, and tells the client it may send queries.
    async fn admit<C>(&self, client: &mut C, user: &str, trusted: bool) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Checked after the password, as Postgres does, so that a client
        // without it does not learn the role exists.
        if self
            .engine
            .roles()
            .get(user)
            .is_some_and(|role| !role.login)
        {
            return Err(fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                &format!("role \"{user}\" is not permitted to log in"),
            ));
        }
        let superuser = self
            .engine
            .roles()
            .get(user)
            .is_some_and(|role| role.superuser);
        let logged_in = self.admission.log_in(&self.engine, superuser)?;
        client.session_extensions().insert(logged_in);
        let (pid, secret_key) = PID_GENERATOR.generate(client);
        client.set_pid_and_secret_key(pid, secret_key.clone());
        let (handle, guard) = self.connections.register(pid, secret_key.clone());
        client.session_extensions().insert(handle);
        client.session_extensions().insert(guard);
        self.gates.register(pid, &secret_key, &self.gate);
        self.session.set_login(user, trusted);
        finish_authentication(client, &DefaultServerParameterProvider::default()).await
    }

    fn scram_failed<C: ClientInfo>(
        &self,
        client: &C,
        user: &str,
        failure: ScramFailure,
    ) -> PgWireError {
        match failure {
            ScramFailure::WrongProof => self.failed(client, user),
            ScramFailure::Malformed(message) => fatal(sqlstate::PROTOCOL_VIOLATION, &message),
            ScramFailure::NoRandomness => no_randomness(),
        }
    }

    /// Postgres's answer to any failed password, whatever the reason, so
    /// a client learns nothing about which roles exist.
    fn failed<C: ClientInfo>(&self, client: &C, user: &str) -> PgWireError {
        tracing::warn!(peer = %client.socket_addr(), user, "password authentication failed");
        fatal(
            sqlstate::INVALID_PASSWORD,
            &format!("password authentication failed for user \"{user}\""),
        )
    }
}

fn no_randomness() -> PgWireError {
    fatal(
        sqlstate::INTERNAL_ERROR,
        "the system has no random source for the password exchange",
    )
}

/// An error that ends the connection during startup.
pub(super) fn fatal(code: &str, message: &str) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_string(),
        code.to_string(),
        message.to_string(),
    )))
}

fn fatal_with_hint(code: &str, message: &str, hint: &str) -> PgWireError {
    let mut info = ErrorInfo::new("FATAL".to_string(), code.to_string(), message.to_string());
    info.hint = Some(hint.to_string());
    PgWireError::UserError(Box::new(info))
}
