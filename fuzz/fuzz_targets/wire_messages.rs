//! pgwire's frontend message decoders as weir's server runs them: the
//! server codec (`PgWireMessageServerCodec`, the one `process_socket` frames
//! every connection with) decodes a byte stream from a client, and the
//! connection moves through its phases as the server moves it:
//!
//! * AwaitingSslRequest: SSLRequest / GSSENCRequest (refused, as without
//!   TLS), anything else moves on to
//! * AwaitingStartup: StartupMessage or CancelRequest (a cancel ends the
//!   connection); the startup's version is negotiated as pgwire does, then
//! * AuthenticationInProgress: 'p' messages, coerced as weir's
//!   authentication does (Password for MD5, SASLInitialResponse, then
//!   SASLResponse for SCRAM); all three are tried on each, then
//! * ReadyForQuery: Query, Parse, Bind, Execute, Describe, Close, Sync,
//!   Flush, CopyData/CopyDone/CopyFail, Terminate.
//!
//! The first input byte picks the phase to start in and the protocol
//! version (3.0 or 3.2), so seeds can start past the startup phase. A
//! decode error ends the connection (FATAL 08P01), as in the server;
//! `Ok(None)` means the server would wait for more bytes. Any panic is a
//! finding, and so is a decoded message that consumed no bytes (the server
//! would loop on it). Message sizes are bounded by pgwire's own limits
//! (10,000 bytes for most messages), which is what the server uses.
#![no_main]

use std::net::{Ipv4Addr, SocketAddr};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgwire::api::{ClientInfo, DefaultClient, PgWireConnectionState};
use pgwire::messages::startup::PasswordMessageFamily;
use pgwire::messages::{PgWireFrontendMessage, ProtocolVersion, SslNegotiationMetaMessage};
use pgwire::tokio::server::PgWireMessageServerCodec;
use tokio_util::codec::Decoder;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 5432));
    let mut codec = PgWireMessageServerCodec::<String>::new(DefaultClient::new(addr, false));
    codec.client_info.state = match mode & 0b11 {
        0 => PgWireConnectionState::AwaitingSslRequest,
        1 => PgWireConnectionState::AwaitingStartup,
        2 => PgWireConnectionState::AuthenticationInProgress,
        _ => PgWireConnectionState::ReadyForQuery,
    };
    if mode & 0b100 != 0 {
        codec.client_info.protocol_version = ProtocolVersion::PROTOCOL3_0;
    }

    let mut buf = BytesMut::from(stream);
    let (mut ssl_done, mut gss_done) = (false, false);
    loop {
        let state = codec.client_info.state();
        let before = buf.len();
        let message = match codec.decode(&mut buf) {
            Ok(Some(message)) => message,
            // The server waits for more bytes; the input has none.
            Ok(None) => return,
            // pgwire's SSL negotiation treats a failed decode as "no SSL
            // request" and goes on to the startup phase with the same bytes.
            Err(_) if matches!(state, PgWireConnectionState::AwaitingSslRequest) => {
                codec.client_info.set_state(PgWireConnectionState::AwaitingStartup);
                continue;
            }
            // Anywhere else the server answers FATAL and closes.
            Err(_) => return,
        };
        let consumed = before - buf.len();
        let negotiation_peek = matches!(
            message,
            PgWireFrontendMessage::SslNegotiation(SslNegotiationMetaMessage::None)
        );
        assert!(
            consumed > 0 || negotiation_peek,
            "decoded a message from no bytes in {state:?}: {message:?}"
        );
        assert!(consumed <= before);

        match message {
            PgWireFrontendMessage::SslNegotiation(negotiation) => {
                match negotiation {
                    SslNegotiationMetaMessage::PostgresSsl(_) => ssl_done = true,
                    SslNegotiationMetaMessage::PostgresGss(_) => gss_done = true,
                    _ => {
                        ssl_done = true;
                        gss_done = true;
                    }
                }
                if ssl_done && gss_done {
                    codec.client_info.set_state(PgWireConnectionState::AwaitingStartup);
                }
            }
            // A cancel request comes on a connection of its own, which the
            // server closes after it.
            PgWireFrontendMessage::CancelRequest(_) => return,
            PgWireFrontendMessage::Startup(startup) => {
                // pgwire's protocol_negotiation, as weir's startup calls it.
                let version = ProtocolVersion::from_version_number(
                    startup.protocol_number_major,
                    startup.protocol_number_minor,
                );
                match version {
                    Some(version) => codec.client_info.set_protocol_version(version),
                    None if startup.protocol_number_major == 3 => codec
                        .client_info
                        .set_protocol_version(ProtocolVersion::default()),
                    None => return,
                }
                codec
                    .client_info
                    .set_state(PgWireConnectionState::AuthenticationInProgress);
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                if let PasswordMessageFamily::Raw(body) = message {
                    let _ = PasswordMessageFamily::Raw(body.clone()).into_password();
                    let _ = PasswordMessageFamily::Raw(body.clone()).into_sasl_initial_response();
                    let _ = PasswordMessageFamily::Raw(body).into_sasl_response();
                }
            }
            PgWireFrontendMessage::Terminate(_) => return,
            _ => {}
        }
    }
});
