//! TLS for client connections (rustls, via pgwire's negotiation): the
//! certificate chain and private key are PEM files given at start.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;

use crate::error::{Result, WeirError};

/// The acceptor for `certificate` (a PEM chain, server certificate first)
/// and `key` (a PEM private key: PKCS#8, PKCS#1 or SEC1).
pub fn acceptor(certificate: &Path, key: &Path) -> Result<pgwire::tokio::TlsAcceptor> {
    let chain = CertificateDer::pem_file_iter(certificate)
        .and_then(|certificates| certificates.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|error| unreadable("certificate", certificate, &error.to_string()))?;
    if chain.is_empty() {
        return Err(unreadable(
            "certificate",
            certificate,
            "it holds no PEM certificate",
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|error| unreadable("private key", key, &error.to_string()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| {
            builder
                .with_no_client_auth()
                .with_single_cert(chain, key_der)
        })
        .map_err(|error| {
            WeirError::io(format!("cannot use the TLS certificate and key: {error}"))
                .with_hint("Check that the key belongs to the certificate (--tls-cert, --tls-key).")
        })?;
    // Clients that start TLS directly (sslnegotiation=direct) must name
    // this protocol.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(config)))
}

fn unreadable(what: &str, path: &Path, error: &str) -> WeirError {
    WeirError::io(format!(
        "cannot read the TLS {what} {}: {error}",
        path.display()
    ))
    .with_hint("Give PEM files with --tls-cert and --tls-key (e.g. from openssl req -x509).")
}
