//! Test certificates made when a test runs (rcgen, ring): a CA, a broker certificate for
//! `localhost` and `127.0.0.1` signed by it, and a client certificate signed by it. Shared by
//! realnet's unit tests (`src/tls.rs` includes this file) and its integration tests.

#![allow(dead_code)] // each user takes its own part

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// PEM files in one directory.
pub struct TestPki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A second CA that signed nothing here: a client trusting it must refuse the broker.
    pub other_ca: PathBuf,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let pem = params.self_signed(&key).expect("self-signed CA").pem();
    (pem, Issuer::new(params, key))
}

fn leaf(issuer: &Issuer<'static, KeyPair>, names: &[&str], cn: &str) -> (String, String) {
    let key = KeyPair::generate().expect("leaf key");
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, cn);
    let cert = params.signed_by(&key, issuer).expect("signed leaf");
    (cert.pem(), key.serialize_pem())
}

/// Writes a fresh PKI into `dir`.
pub fn make(dir: &Path) -> TestPki {
    let (ca_pem, issuer) = ca("gregor test CA");
    let (other_pem, _) = ca("some other CA");
    let (server_pem, server_key) = leaf(&issuer, &["localhost", "127.0.0.1"], "broker");
    let (client_pem, client_key) = leaf(&issuer, &["client"], "client");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write PEM");
        path
    };
    TestPki {
        ca: write("ca.pem", &ca_pem),
        server_cert: write("broker.pem", &server_pem),
        server_key: write("broker.key", &server_key),
        client_cert: write("client.pem", &client_pem),
        client_key: write("client.key", &client_key),
        other_ca: write("other-ca.pem", &other_pem),
    }
}
