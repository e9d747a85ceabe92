//! TLS settings for [`RealRuntime`](crate::runtime::RealRuntime): rustls configurations built from
//! PEM files, and which connections use them.
//!
//! Kafka keeps keys in JKS/PKCS#12 keystores; Gregor takes PEM paths instead, named as librdkafka
//! names them: `ssl.certificate.location` (the certificate chain, leaf first),
//! `ssl.key.location` (PKCS#8, PKCS#1 or SEC1 private key), `ssl.ca.location` (trusted CA
//! certificates) and, on a broker, `ssl.client.auth` (`required` or `none`, Kafka's name).
//!
//! Contract: a file that cannot be read or holds no usable certificate/key is an error naming the
//! file, raised at startup, never at the first connection. The ring provider is used (it builds
//! with a C compiler alone). The record layer itself lives in `runtime.rs`, which drives rustls'
//! `read_tls`/`write_tls` over its own socket loop.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Which connections of a runtime speak TLS. The default speaks none.
#[derive(Clone, Default)]
pub struct TlsSettings {
    /// Accepted connections start a TLS server handshake (an SSL or SASL_SSL listener).
    pub server: Option<Arc<ServerConfig>>,
    /// Outgoing connections start a TLS client handshake, except to the addresses in
    /// `plaintext_addrs` (a broker's coordinators, which listen in plaintext).
    pub client: Option<Arc<ClientConfig>>,
    pub plaintext_addrs: BTreeSet<String>,
}

impl TlsSettings {
    /// The client configuration for a connection to `addr`, if it speaks TLS.
    pub fn client_for(&self, addr: &str) -> Option<Arc<ClientConfig>> {
        self.client.clone().filter(|_| !self.plaintext_addrs.contains(addr))
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in the PEM file at `path` (at least one).
pub fn load_certs(path: &Path, key: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let bytes = std::fs::read(path).with_context(|| format!("{key}: cannot read {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{key}: {} is not valid PEM", path.display()))?;
    if certs.is_empty() {
        bail!("{key}: {} holds no CERTIFICATE block", path.display());
    }
    Ok(certs)
}

/// The private key in the PEM file at `path`.
pub fn load_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let bytes = std::fs::read(path).with_context(|| format!("ssl.key.location: cannot read {}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&bytes).with_context(|| {
        format!(
            "ssl.key.location: {} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
            path.display()
        )
    })
}

fn roots(ca: &Path) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(ca, "ssl.ca.location")? {
        roots
            .add(cert)
            .with_context(|| format!("ssl.ca.location: {} holds a certificate rustls refuses", ca.display()))?;
    }
    Ok(roots)
}

/// A broker's TLS listener: its certificate chain and key, and, when `client_auth_required`,
/// the CAs a client certificate must chain to (mutual TLS).
pub fn server_config(
    cert: &Path,
    key: &Path,
    ca: Option<&Path>,
    client_auth_required: bool,
) -> anyhow::Result<Arc<ServerConfig>> {
    let chain = load_certs(cert, "ssl.certificate.location")?;
    let key_der = load_key(key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = if client_auth_required {
        let ca = ca.context("ssl.client.auth=required needs ssl.ca.location (the CAs client certificates chain to)")?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
            .build()
            .context("ssl.ca.location: cannot build the client certificate verifier")?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(chain, key_der).with_context(|| {
        format!(
            "ssl.key.location {} does not match ssl.certificate.location {}",
            key.display(),
            cert.display()
        )
    })?;
    Ok(Arc::new(config))
}

/// A TLS client trusting the CAs in `ca`, presenting `identity` (certificate and key paths)
/// when the server asks for one.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> anyhow::Result<Arc<ClientConfig>> {
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
        .build()
        .context("ssl.ca.location: cannot build the server certificate verifier")?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_webpki_verifier(verifier);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert, "ssl.certificate.location")?, load_key(key)?)
            .context("the client certificate and key do not match")?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The name a TLS client checks the server's certificate against: the host of `addr`
/// (`host:port` or `[v6]:port`), a DNS name or an IP address.
pub fn server_name(addr: &str) -> Option<ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).ok()
}

#[cfg(test)]
#[path = "../tests/common/certs.rs"]
pub mod test_certs;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_host_part() {
        assert_eq!(server_name("127.0.0.1:9092"), ServerName::try_from("127.0.0.1").ok());
        assert_eq!(server_name("[::1]:9092"), ServerName::try_from("::1").ok());
        assert_eq!(
            server_name("broker-1.example:9093"),
            ServerName::try_from("broker-1.example").ok()
        );
    }

    #[test]
    fn missing_and_malformed_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("nope.pem");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").expect("write");
        for (cert, key) in [(&missing, &junk), (&junk, &junk)] {
            let error = format!("{:#}", server_config(cert, key, None, false).expect_err("refused"));
            assert!(error.contains(&cert.display().to_string()), "{error}");
        }
        let error = format!("{:#}", client_config(&junk, None).expect_err("refused"));
        assert!(
            error.contains("junk.pem") && error.contains("ssl.ca.location"),
            "{error}"
        );
        let pki = test_certs::make(dir.path());
        let error = format!(
            "{:#}",
            server_config(&pki.server_cert, &pki.client_key, None, false).expect_err("mismatch")
        );
        assert!(error.contains("does not match"), "{error}");
        let error = format!(
            "{:#}",
            server_config(&pki.server_cert, &pki.server_key, None, true).expect_err("no CA")
        );
        assert!(error.contains("ssl.ca.location"), "{error}");
        assert!(server_config(&pki.server_cert, &pki.server_key, Some(&pki.ca), true).is_ok());
    }
}
