//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: the derived
//! credential a server keeps (salt, StoredKey, ServerKey, iterations; never the password), the
//! message formats, and both ends' arithmetic. No I/O; nonces come in as arguments.
//!
//! Contract: every parser takes untrusted bytes and returns `Err` (a reason without secrets)
//! rather than panicking. Passwords are used as their UTF-8 bytes, as Kafka's `ScramFormatter`
//! does (no SASLprep). Iteration counts are bounded by [`ITERATIONS_MIN`]..=[`ITERATIONS_MAX`]
//! (Kafka's 4096..16384), on both sides: a server cannot make a client spin.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use super::sasl::Mechanism;

pub const ITERATIONS_MIN: u32 = 4096;
pub const ITERATIONS_MAX: u32 = 16384;

/// What a server stores for one user and mechanism.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// Derives the stored credential from a password (done once, by `gregor users add` or the
    /// broker at start; the password is not kept).
    pub fn from_password(mechanism: Mechanism, password: &str, salt: &[u8], iterations: u32) -> ScramCredential {
        let salted = hi(mechanism, password.as_bytes(), salt, iterations);
        let client_key = hmac(mechanism, &salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: hash(mechanism, &client_key),
            server_key: hmac(mechanism, &salted, b"Server Key"),
            iterations,
        }
    }
}

pub fn hmac(m: Mechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    match m {
        Mechanism::ScramSha512 => {
            let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes keys of any length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        // PLAIN never reaches here; SHA-256 is the answer for it rather than a panic.
        Mechanism::ScramSha256 | Mechanism::Plain => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
    }
}

pub fn hash(m: Mechanism, data: &[u8]) -> Vec<u8> {
    match m {
        Mechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        Mechanism::ScramSha256 | Mechanism::Plain => Sha256::digest(data).to_vec(),
    }
}

/// RFC 5802's Hi(): PBKDF2 with HMAC as the PRF and one block.
pub fn hi(m: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut first = salt.to_vec();
    first.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac(m, password, &first);
    let mut out = u.clone();
    for _ in 1..iterations {
        u = hmac(m, password, &u);
        out.iter_mut().zip(&u).for_each(|(o, x)| *o ^= x);
    }
    out
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// `saslname` escaping: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed.
fn unescape_name(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err("bad escape in user name".into()),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn escape_name(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// `key=value` attributes of a SCRAM message, in order.
fn attributes(msg: &str) -> Result<Vec<(char, &str)>, String> {
    msg.split(',')
        .map(|part| {
            let mut chars = part.chars();
            match (chars.next(), chars.next()) {
                (Some(k), Some('=')) if k.is_ascii_alphabetic() => Ok((k, &part[2..])),
                _ => Err("malformed SCRAM attribute".to_string()),
            }
        })
        .collect()
}

fn printable_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// The server after the client's first message: what it must remember for the final one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFirst {
    pub user: String,
    pub client_first_bare: String,
    pub server_first: String,
    pub nonce: String,
}

/// The user a client-first message names (before its credential is looked up).
pub fn client_first_user(token: &[u8]) -> Result<(String, String, String), String> {
    let msg = std::str::from_utf8(token).map_err(|_| "SCRAM message is not UTF-8".to_string())?;
    // gs2-header: channel binding flag "n" (Kafka supports none), optional authzid, then the bare.
    let (flag, rest) = msg.split_once(',').ok_or("no gs2 header")?;
    if flag != "n" && flag != "y" {
        return Err("channel binding is not supported".into());
    }
    let (authzid, bare) = rest.split_once(',').ok_or("no gs2 header")?;
    let attrs = attributes(bare)?;
    let (Some(('n', name)), Some(('r', nonce))) = (attrs.first().copied(), attrs.get(1).copied()) else {
        return Err("client-first message is not n=USER,r=NONCE".into());
    };
    // Extensions (Kafka's tokenauth) are not supported: delegation tokens do not exist here.
    if attrs.len() > 2 {
        return Err("SCRAM extensions are not supported".into());
    }
    let user = unescape_name(name)?;
    if user.is_empty() || !printable_nonce(nonce) {
        return Err("empty user name or bad nonce".into());
    }
    if let Some(a) = authzid.strip_prefix("a=") {
        if unescape_name(a)? != user {
            return Err("authorization id differs from the user".into());
        }
    } else if !authzid.is_empty() {
        return Err("malformed authzid".into());
    }
    Ok((user, bare.to_string(), nonce.to_string()))
}

/// The server's first message for a valid client-first (`client_nonce` from
/// [`client_first_user`]), adding `server_nonce` (printable, no commas).
pub fn server_first(
    user: String,
    client_first_bare: String,
    client_nonce: &str,
    server_nonce: &str,
    cred: &ScramCredential,
) -> ServerFirst {
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!("r={nonce},s={},i={}", B64.encode(&cred.salt), cred.iterations);
    ServerFirst {
        user,
        client_first_bare,
        server_first,
        nonce,
    }
}

/// Checks the client's final message; `Ok(server-final message)` when the proof is right.
pub fn server_final(m: Mechanism, state: &ServerFirst, cred: &ScramCredential, token: &[u8]) -> Result<String, String> {
    let msg = std::str::from_utf8(token).map_err(|_| "SCRAM message is not UTF-8".to_string())?;
    let (without_proof, proof) = msg.rsplit_once(",p=").ok_or("client-final message without a proof")?;
    let attrs = attributes(without_proof)?;
    let (Some(('c', binding)), Some(('r', nonce))) = (attrs.first().copied(), attrs.get(1).copied()) else {
        return Err("client-final message is not c=..,r=..,p=..".into());
    };
    if attrs.len() > 2 {
        return Err("SCRAM extensions are not supported".into());
    }
    // "n,," or "n,a=NAME," base64-encoded: the client's gs2 header again (no channel binding).
    let header = B64.decode(binding).map_err(|_| "channel binding is not base64")?;
    if !header.starts_with(b"n,") && !header.starts_with(b"y,") {
        return Err("channel binding is not supported".into());
    }
    // Kafka's ScramSaslServer checks that the client's nonce *ends with* the server's, and
    // librdkafka up to 2.0 relies on it: it sends its own nonce in front of the combined one
    // (kcat on Debian 12 does). The server's random part still has to come back, so a replayed
    // exchange is refused as before; the proof covers the message as the client sent it.
    if !nonce.ends_with(state.nonce.as_str()) {
        return Err("nonce differs from the server's".into());
    }
    let proof = B64.decode(proof).map_err(|_| "proof is not base64")?;
    let auth_message = format!("{},{},{}", state.client_first_bare, state.server_first, without_proof);
    let client_signature = hmac(m, &cred.stored_key, auth_message.as_bytes());
    if proof.len() != client_signature.len() {
        return Err("proof of the wrong length".into());
    }
    let client_key = xor(&proof, &client_signature);
    if !super::sasl::constant_time_eq(&hash(m, &client_key), &cred.stored_key) {
        return Err("Authentication failed: Invalid user credentials".into());
    }
    let server_signature = hmac(m, &cred.server_key, auth_message.as_bytes());
    Ok(format!("v={}", B64.encode(server_signature)))
}

/// The client side of one exchange.
#[derive(Clone, Debug)]
pub struct ScramClient {
    mechanism: Mechanism,
    client_first_bare: String,
    client_nonce: String,
    /// Set after the server's first message: the ServerSignature to expect.
    expected_server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    /// The client's first message, with `client_nonce` (printable, no commas).
    pub fn first(mechanism: Mechanism, user: &str, client_nonce: &str) -> (ScramClient, Vec<u8>) {
        let bare = format!("n={},r={client_nonce}", escape_name(user));
        let token = format!("n,,{bare}").into_bytes();
        let client = ScramClient {
            mechanism,
            client_first_bare: bare,
            client_nonce: client_nonce.to_string(),
            expected_server_signature: None,
        };
        (client, token)
    }

    /// The server's first message in, the client's final message out.
    pub fn final_message(&mut self, password: &str, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let msg = std::str::from_utf8(server_first).map_err(|_| "server-first is not UTF-8".to_string())?;
        let attrs = attributes(msg)?;
        let (Some(('r', nonce)), Some(('s', salt)), Some(('i', iterations))) =
            (attrs.first().copied(), attrs.get(1).copied(), attrs.get(2).copied())
        else {
            return Err(format!("server-first message is not r=..,s=..,i=..: {msg:?}"));
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() || !printable_nonce(nonce) {
            return Err("server nonce does not extend the client's".into());
        }
        let salt = B64.decode(salt).map_err(|_| "salt is not base64")?;
        let iterations: u32 = iterations.parse().map_err(|_| "iteration count is not a number")?;
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
            return Err(format!(
                "iteration count {iterations} outside {ITERATIONS_MIN}..={ITERATIONS_MAX}"
            ));
        }
        let m = self.mechanism;
        let salted = hi(m, password.as_bytes(), &salt, iterations);
        let client_key = hmac(m, &salted, b"Client Key");
        let stored_key = hash(m, &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{msg},{without_proof}", self.client_first_bare);
        let proof = xor(&client_key, &hmac(m, &stored_key, auth_message.as_bytes()));
        let server_key = hmac(m, &salted, b"Server Key");
        self.expected_server_signature = Some(hmac(m, &server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// The server's final message: `Ok` when it proves it knows the credential.
    pub fn verify_server(&self, server_final: &[u8]) -> Result<(), String> {
        let msg = std::str::from_utf8(server_final).map_err(|_| "server-final is not UTF-8".to_string())?;
        if let Some(e) = msg.strip_prefix("e=") {
            return Err(format!("server refused: {e}"));
        }
        let v = msg.strip_prefix("v=").ok_or("server-final message is not v=..")?;
        let got = B64.decode(v).map_err(|_| "server signature is not base64")?;
        match &self.expected_server_signature {
            Some(want) if super::sasl::constant_time_eq(want, &got) => Ok(()),
            _ => Err("server signature does not match: the server does not know the credential".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // RFC 7677 section 3: user "user", password "pencil".
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str =
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_credential() -> ScramCredential {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        ScramCredential::from_password(Mechanism::ScramSha256, "pencil", &salt, 4096)
    }

    #[test]
    fn server_side_matches_rfc_7677() {
        let cred = rfc_credential();
        let (user, bare, cnonce) = client_first_user(CLIENT_FIRST.as_bytes()).expect("valid client-first");
        assert_eq!(user, "user");
        let state = server_first(user, bare, &cnonce, SERVER_NONCE, &cred);
        assert_eq!(state.server_first, SERVER_FIRST);
        let fin = server_final(Mechanism::ScramSha256, &state, &cred, CLIENT_FINAL.as_bytes()).expect("proof accepted");
        assert_eq!(fin, SERVER_FINAL);
        println!("RFC 7677 server side: server-first and server-final match the RFC byte for byte");
    }

    #[test]
    fn a_client_nonce_repeated_in_front_is_accepted_as_kafka_does_and_a_foreign_one_is_not() {
        let cred = rfc_credential();
        let (user, bare, cnonce) = client_first_user(CLIENT_FIRST.as_bytes()).expect("valid client-first");
        let state = server_first(user, bare, &cnonce, SERVER_NONCE, &cred);
        let proof_for = |without_proof: &str| {
            let auth = format!("{},{},{without_proof}", state.client_first_bare, state.server_first);
            let salted = hi(Mechanism::ScramSha256, b"pencil", &cred.salt, cred.iterations);
            let client_key = hmac(Mechanism::ScramSha256, &salted, b"Client Key");
            let signature = hmac(Mechanism::ScramSha256, &cred.stored_key, auth.as_bytes());
            format!("{without_proof},p={}", B64.encode(xor(&client_key, &signature)))
        };
        // librdkafka 2.0: c=biws,r=<client nonce><client nonce + server nonce>.
        let doubled = proof_for(&format!("c=biws,r={cnonce}{}", state.nonce));
        assert!(server_final(Mechanism::ScramSha256, &state, &cred, doubled.as_bytes()).is_ok());
        let foreign = proof_for(&format!("c=biws,r={cnonce}somethingelse"));
        assert_eq!(
            server_final(Mechanism::ScramSha256, &state, &cred, foreign.as_bytes()),
            Err("nonce differs from the server's".to_string())
        );
        println!("doubled client nonce accepted, foreign nonce refused");
    }

    #[test]
    fn client_side_matches_rfc_7677() {
        let (mut client, first) = ScramClient::first(Mechanism::ScramSha256, "user", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(first, CLIENT_FIRST.as_bytes());
        let fin = client
            .final_message("pencil", SERVER_FIRST.as_bytes())
            .expect("client final");
        assert_eq!(std::str::from_utf8(&fin).unwrap(), CLIENT_FINAL);
        client.verify_server(SERVER_FINAL.as_bytes()).expect("server verified");
        assert!(client.verify_server(b"v=AAAA").is_err());
    }

    #[test]
    fn sha_512_round_trips_and_a_wrong_password_is_refused() {
        let cred = ScramCredential::from_password(Mechanism::ScramSha512, "pw", b"salty", 4096);
        for (password, ok) in [("pw", true), ("wrong", false)] {
            let (mut client, first) = ScramClient::first(Mechanism::ScramSha512, "a,b=c", "cnonce");
            let (user, bare, cnonce) = client_first_user(&first).unwrap();
            assert_eq!(user, "a,b=c");
            let state = server_first(user, bare, &cnonce, "snonce", &cred);
            let fin = client.final_message(password, state.server_first.as_bytes()).unwrap();
            let result = server_final(Mechanism::ScramSha512, &state, &cred, &fin);
            assert_eq!(result.is_ok(), ok, "{password}: {result:?}");
            if let Ok(v) = result {
                client.verify_server(v.as_bytes()).expect("server verified");
            }
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        for bad in [
            &b""[..],
            b"n,,",
            b"p=tls-unique,,n=user,r=x",
            b"n,,r=x,n=user",
            b"n,,n=user,r=x,ext=1",
            b"n,,n=us=er,r=x",
            b"n,a=other,n=user,r=x",
            b"n,,n=,r=x",
            b"\xff",
        ] {
            assert!(client_first_user(bad).is_err(), "{bad:?} accepted");
        }
        let cred = rfc_credential();
        let (user, bare, cnonce) = client_first_user(CLIENT_FIRST.as_bytes()).unwrap();
        let state = server_first(user, bare, &cnonce, SERVER_NONCE, &cred);
        for bad in [
            "",
            "c=biws",
            "c=biws,r=other,p=AAAA",
            "c=!!,r=x,p=AA",
            "c=biws,r=x,p=***",
        ] {
            assert!(
                server_final(Mechanism::ScramSha256, &state, &cred, bad.as_bytes()).is_err(),
                "{bad:?}"
            );
        }
        let (mut client, _) = ScramClient::first(Mechanism::ScramSha256, "user", "abc");
        for bad in [
            "r=xyz,s=AA==,i=4096",
            "r=abcd,s=AA==,i=1",
            "r=abcd,s=AA==,i=99999999",
            "r=abcd,s=!,i=4096",
            "",
        ] {
            assert!(client.final_message("pw", bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// Arbitrary tokens at every step of the server never panic.
        #[test]
        fn arbitrary_tokens_never_panic(token in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = client_first_user(&token);
            let cred = rfc_credential_cached();
            let state = ServerFirst {
                user: "user".into(),
                client_first_bare: "n=user,r=x".into(),
                server_first: "r=xy,s=AA==,i=4096".into(),
                nonce: "xy".into(),
            };
            let _ = server_final(Mechanism::ScramSha256, &state, &cred, &token);
            let (client, _) = ScramClient::first(Mechanism::ScramSha256, "user", "x");
            let _ = client.verify_server(&token);
        }
    }

    fn rfc_credential_cached() -> ScramCredential {
        ScramCredential {
            salt: vec![1],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations: 4096,
        }
    }
}
