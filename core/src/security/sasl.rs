//! SASL authentication on the broker side: the per-connection state machine that Kafka's
//! `SaslServerAuthenticator` is, as a value with no I/O. The node driver feeds it SaslHandshake
//! and SaslAuthenticate requests (or, after a v0 handshake, bare token frames) and acts on what
//! it returns; it owns no socket and no clock.
//!
//! Contract (issue #7): on a listener that requires SASL, before authentication succeeds only
//! ApiVersions, SaslHandshake and SaslAuthenticate are served ([`SaslState::allows`]); anything
//! else closes the connection. A token that does not parse, or a failed login, ends in
//! [`AuthStep::Failed`]: the driver answers SASL_AUTHENTICATION_FAILED (after
//! [`SaslConfig::failure_delay_ms`], the rate limit) and closes that connection only. Tokens are
//! untrusted: nothing here panics on them, and no secret (password, proof) is ever logged or put
//! in an error message.
//!
//! Fault model: the client may send anything in any order; a handshake twice, a token before
//! the handshake, or SASL on a listener without it is ILLEGAL_SASL_STATE and closes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use super::scram::{self, ScramCredential, ServerFirst};
use super::users::{apply, Change, Failure as UserFailure, StoredUsers};
use super::Principal;

/// Kafka's `security.protocol` of a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SecurityProtocol {
    Plaintext,
    SaslPlaintext,
    Ssl,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

/// A SASL mechanism Gregor speaks, named as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 3] = [Mechanism::Plain, Mechanism::ScramSha256, Mechanism::ScramSha512];

    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name.trim())
    }

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Longest SASL token accepted (a PLAIN token is two names and a password; SCRAM messages are
/// a few hundred bytes). Longer is malformed.
pub const TOKEN_BYTES_MAX: usize = 4096;
/// How many users' failure counts the rate limiter remembers; past it the oldest are forgotten.
pub const FAILED_USERS_MAX: usize = 10_000;
/// The longest a failure answer is delayed, however often a user failed.
pub const FAILURE_DELAY_MS_MAX: u64 = 5_000;

/// A broker's SASL settings, shared by its connections.
#[derive(Debug, Default)]
pub struct SaslConfig {
    /// `sasl.enabled.mechanisms`, in the order the handshake lists them.
    pub mechanisms: Vec<Mechanism>,
    /// PLAIN users and their passwords (Kafka's JAAS `user_NAME="pw"`); `sasl.plain.users`.
    pub plain_users: BTreeMap<String, String>,
    /// `connection.failed.authentication.delay.ms`: the first failure's delay before its answer;
    /// it doubles with each further consecutive failure of the same user, up to
    /// [`FAILURE_DELAY_MS_MAX`].
    pub failed_authentication_delay_ms: u64,
    /// Consecutive failures per user name (the rate limiter's memory).
    failures: RefCell<BTreeMap<String, u32>>,
    /// SCRAM credentials by (user, mechanism) from the config file (`sasl.scram.users`, the
    /// bootstrap users such as the inter-broker one): derived keys only, never passwords.
    scram: RefCell<BTreeMap<(String, Mechanism), ScramCredential>>,
    /// SCRAM users stored with AlterUserScramCredentials: the coordinator's, as the broker's
    /// watch last read them (cluster mode), or the node's own store (single node). Looked up
    /// before the config file's.
    stored: RefCell<StoredUsers>,
}

impl SaslConfig {
    pub fn plain(users: BTreeMap<String, String>) -> SaslConfig {
        SaslConfig {
            mechanisms: vec![Mechanism::Plain],
            plain_users: users,
            failed_authentication_delay_ms: 100,
            failures: RefCell::default(),
            scram: RefCell::default(),
            stored: RefCell::default(),
        }
    }

    /// Sets (`Some`) or removes (`None`) `user`'s SCRAM credential for `mechanism`; new logins
    /// use it at once, established sessions are not affected (as in Kafka).
    pub fn set_scram(&self, user: &str, mechanism: Mechanism, credential: Option<ScramCredential>) {
        let key = (user.to_string(), mechanism);
        let mut scram = self.scram.borrow_mut();
        match credential {
            Some(c) => scram.insert(key, c),
            None => scram.remove(&key),
        };
    }

    /// The SCRAM users and their mechanisms and iteration counts, stored ones and the config
    /// file's (what DescribeUserScramCredentials lists); a stored credential hides the file's.
    pub fn scram_users(&self) -> Vec<(String, Mechanism, u32)> {
        let mut all: BTreeMap<(String, Mechanism), u32> = self
            .scram
            .borrow()
            .iter()
            .map(|((u, m), c)| ((u.clone(), *m), c.iterations))
            .collect();
        for (u, creds) in self.stored.borrow().iter() {
            for (m, c) in creds {
                all.insert((u.clone(), *m), c.iterations);
            }
        }
        all.into_iter().map(|((u, m), i)| (u, m, i)).collect()
    }

    /// The credential a login of `user` with `mechanism` is checked against: the stored one,
    /// else the config file's.
    pub fn scram_credential(&self, user: &str, mechanism: Mechanism) -> Option<ScramCredential> {
        let stored = self.stored.borrow().get(user).and_then(|c| c.get(&mechanism)).cloned();
        stored.or_else(|| self.scram.borrow().get(&(user.to_string(), mechanism)).cloned())
    }

    /// The stored users (cluster mode: as last read from the coordinator).
    pub fn stored_users(&self) -> StoredUsers {
        self.stored.borrow().clone()
    }

    /// Replaces the stored users (the sync task, after reading the coordinator). Returns whether
    /// anything changed.
    pub fn replace_stored_users(&self, users: StoredUsers) -> bool {
        let mut stored = self.stored.borrow_mut();
        let changed = *stored != users;
        *stored = users;
        changed
    }

    /// Single node: applies one user's changes to the node's own store.
    pub fn apply_stored(&self, user: &str, changes: &[Change]) -> Result<(), UserFailure> {
        let mut stored = self.stored.borrow_mut();
        let mut creds = stored.get(user).cloned().unwrap_or_default();
        apply(&mut creds, changes)?;
        if creds.is_empty() {
            stored.remove(user);
        } else {
            stored.insert(user.to_string(), creds);
        }
        Ok(())
    }

    /// Records a failed login of `user` and returns how long to wait before answering it.
    pub fn failure_delay_ms(&self, user: &str) -> u64 {
        let mut failures = self.failures.borrow_mut();
        if failures.len() >= FAILED_USERS_MAX && !failures.contains_key(user) {
            failures.clear();
        }
        let n = failures.entry(user.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let doublings = (*n - 1).min(16);
        self.failed_authentication_delay_ms
            .saturating_mul(1u64 << doublings)
            .min(FAILURE_DELAY_MS_MAX.max(self.failed_authentication_delay_ms))
    }

    /// A successful login clears the user's failures.
    pub fn succeeded(&self, user: &str) {
        self.failures.borrow_mut().remove(user);
    }

    fn enabled(&self, m: Mechanism) -> bool {
        self.mechanisms.contains(&m)
    }
}

/// Where one connection is in authentication.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum SaslState {
    /// The listener does not use SASL: every request is served as `User:ANONYMOUS`.
    #[default]
    NotRequired,
    /// Waiting for SaslHandshake.
    AwaitingHandshake,
    /// Handshake done: the next token (in SaslAuthenticate, or a bare frame when `legacy`,
    /// after a v0 handshake) is the mechanism's first.
    Handshaken { mechanism: Mechanism, legacy: bool },
    /// SCRAM: the server's first message is sent; the client's final one is next.
    ScramFirstSent {
        mechanism: Mechanism,
        legacy: bool,
        first: ServerFirst,
    },
    /// Authenticated: every request is served.
    Authenticated,
}

/// What the driver does after a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthStep {
    /// Send `token` back; the exchange goes on.
    Continue(Vec<u8>),
    /// Authenticated as `principal`; send `token` back (empty for PLAIN).
    Done { token: Vec<u8>, principal: Principal },
    /// Refused: answer SASL_AUTHENTICATION_FAILED with `reason` (no secrets in it), rate-limited
    /// per `user` when one was named, then close.
    Failed { reason: String, user: Option<String> },
}

impl SaslState {
    /// The state a new connection starts in on a listener that does (or does not) use SASL.
    pub fn for_listener(sasl: bool) -> SaslState {
        if sasl {
            SaslState::AwaitingHandshake
        } else {
            SaslState::NotRequired
        }
    }

    /// Whether a request of `api_key` may be served now.
    pub fn allows(&self, api_key: i16) -> bool {
        use crate::protocol::api::{api_versions, sasl_authenticate, sasl_handshake};
        matches!(self, SaslState::NotRequired | SaslState::Authenticated)
            || [
                api_versions::API_KEY,
                sasl_handshake::API_KEY,
                sasl_authenticate::API_KEY,
            ]
            .contains(&api_key)
    }

    /// Whether the next frame is a bare SASL token (after a v0 handshake), not a Kafka request.
    pub fn expects_bare_token(&self) -> bool {
        matches!(
            self,
            SaslState::Handshaken { legacy: true, .. } | SaslState::ScramFirstSent { legacy: true, .. }
        )
    }

    /// SaslHandshake at `version` asking for `mechanism`: the error code to answer (0 when the
    /// exchange may begin) and the enabled mechanisms to list.
    pub fn handshake(&mut self, config: &SaslConfig, mechanism: &str, version: i16) -> (crate::ErrorCode, Vec<String>) {
        let enabled = config.mechanisms.iter().map(|m| m.name().to_string()).collect();
        if *self != SaslState::AwaitingHandshake {
            return (crate::ErrorCode::IllegalSaslState, enabled);
        }
        match Mechanism::parse(mechanism).filter(|m| config.enabled(*m)) {
            Some(m) => {
                *self = SaslState::Handshaken {
                    mechanism: m,
                    legacy: version == 0,
                };
                (crate::ErrorCode::None, enabled)
            }
            None => (crate::ErrorCode::UnsupportedSaslMechanism, enabled),
        }
    }

    /// One client token; `server_nonce` (printable ASCII, no commas, fresh per connection) is
    /// used by SCRAM. `Err` is a token out of order (ILLEGAL_SASL_STATE): close.
    pub fn authenticate(
        &mut self,
        config: &SaslConfig,
        token: &[u8],
        server_nonce: &str,
    ) -> Result<AuthStep, crate::ErrorCode> {
        if !matches!(self, SaslState::Handshaken { .. } | SaslState::ScramFirstSent { .. }) {
            return Err(crate::ErrorCode::IllegalSaslState);
        }
        if token.len() > TOKEN_BYTES_MAX {
            *self = SaslState::AwaitingHandshake;
            return Ok(AuthStep::Failed {
                reason: format!("SASL token of {} bytes (max {TOKEN_BYTES_MAX})", token.len()),
                user: None,
            });
        }
        let step = match std::mem::replace(self, SaslState::AwaitingHandshake) {
            SaslState::Handshaken {
                mechanism: Mechanism::Plain,
                ..
            } => plain(config, token),
            SaslState::Handshaken { mechanism, legacy } => match scram_first(config, mechanism, token, server_nonce) {
                Ok((first, reply)) => {
                    *self = SaslState::ScramFirstSent {
                        mechanism,
                        legacy,
                        first,
                    };
                    AuthStep::Continue(reply)
                }
                Err(step) => step,
            },
            SaslState::ScramFirstSent { mechanism, first, .. } => {
                let credential = config.scram_credential(&first.user, mechanism);
                let checked = credential
                    .ok_or_else(|| "credential removed during login".to_string())
                    .and_then(|c| scram::server_final(mechanism, &first, &c, token));
                match checked {
                    Ok(fin) => AuthStep::Done {
                        token: fin.into_bytes(),
                        principal: Principal::user(&first.user),
                    },
                    Err(reason) => AuthStep::Failed {
                        reason,
                        user: Some(first.user),
                    },
                }
            }
            other => {
                *self = other;
                return Err(crate::ErrorCode::IllegalSaslState);
            }
        };
        if let AuthStep::Done { principal, .. } = &step {
            config.succeeded(&principal.name);
            *self = SaslState::Authenticated;
        }
        Ok(step)
    }
}

/// SCRAM's client-first message: the server-first reply, or the failure (unknown user, malformed).
fn scram_first(
    config: &SaslConfig,
    mechanism: Mechanism,
    token: &[u8],
    server_nonce: &str,
) -> Result<(ServerFirst, Vec<u8>), AuthStep> {
    let (user, bare, client_nonce) = scram::client_first_user(token).map_err(|why| AuthStep::Failed {
        reason: format!("malformed SCRAM client-first message: {why}"),
        user: None,
    })?;
    let Some(credential) = config.scram_credential(&user, mechanism) else {
        return Err(AuthStep::Failed {
            reason: format!("Authentication failed: Invalid user credentials (user {user:?})"),
            user: Some(user),
        });
    };
    let first = scram::server_first(user, bare, &client_nonce, server_nonce, &credential);
    let reply = first.server_first.clone().into_bytes();
    Ok((first, reply))
}

/// RFC 4616: `[authzid] NUL authcid NUL passwd`. An authzid other than the user is refused, as
/// Kafka's PlainSaslServer does.
fn plain(config: &SaslConfig, token: &[u8]) -> AuthStep {
    let malformed = |what: &str| AuthStep::Failed {
        reason: format!("malformed SASL/PLAIN token: {what}"),
        user: None,
    };
    let mut parts = token.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return malformed("expected authzid NUL user NUL password");
    };
    let (Ok(authzid), Ok(user)) = (std::str::from_utf8(authzid), std::str::from_utf8(user)) else {
        return malformed("names are not UTF-8");
    };
    if user.is_empty() {
        return malformed("empty user name");
    }
    if !authzid.is_empty() && authzid != user {
        return AuthStep::Failed {
            reason: "authorization id differs from the user".into(),
            user: Some(user.to_string()),
        };
    }
    let known = config.plain_users.get(user);
    if known.is_some_and(|pw| constant_time_eq(pw.as_bytes(), password)) {
        AuthStep::Done {
            token: Vec::new(),
            principal: Principal::user(user),
        }
    } else {
        AuthStep::Failed {
            reason: format!("Authentication failed: Invalid username or password (user {user:?})"),
            user: Some(user.to_string()),
        }
    }
}

/// Compares secrets in time that depends only on their lengths, not on where they first differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::api::{api_versions, metadata, sasl_handshake};
    use crate::security::scram::ScramCredential;
    use crate::ErrorCode;

    fn config() -> SaslConfig {
        SaslConfig::plain(BTreeMap::from([("alice".to_string(), "alice-secret".to_string())]))
    }

    #[test]
    fn plain_login_authenticates_the_user() {
        let cfg = config();
        let mut s = SaslState::for_listener(true);
        assert!(s.allows(api_versions::API_KEY) && s.allows(sasl_handshake::API_KEY));
        assert!(!s.allows(metadata::API_KEY));
        assert_eq!(
            s.handshake(&cfg, "PLAIN", 1),
            (ErrorCode::None, vec!["PLAIN".to_string()])
        );
        let step = s.authenticate(&cfg, b"\0alice\0alice-secret", "n").unwrap();
        assert_eq!(
            step,
            AuthStep::Done {
                token: vec![],
                principal: Principal::user("alice")
            }
        );
        assert!(s.allows(metadata::API_KEY));
        // A second handshake on an authenticated connection is out of order.
        assert_eq!(s.handshake(&cfg, "PLAIN", 1).0, ErrorCode::IllegalSaslState);
    }

    #[test]
    fn wrong_password_unknown_user_and_malformed_tokens_fail_without_the_secret() {
        let cfg = config();
        for token in [
            &b"\0alice\0wrong"[..],
            b"\0mallory\0alice-secret",
            b"alice-secret",
            b"\0alice\0alice-secret\0",
            b"bob\0alice\0alice-secret",
            b"\0\0x",
            b"\0\xff\0x",
        ] {
            let mut s = SaslState::for_listener(true);
            s.handshake(&cfg, "PLAIN", 1);
            let step = s.authenticate(&cfg, token, "n").unwrap();
            let AuthStep::Failed { reason, .. } = step else {
                panic!("{token:?} authenticated: {step:?}")
            };
            assert!(!reason.contains("alice-secret"), "secret in {reason:?}");
            assert!(!s.allows(metadata::API_KEY));
        }
    }

    #[test]
    fn out_of_order_and_unknown_mechanisms_are_refused() {
        let cfg = config();
        let mut s = SaslState::for_listener(true);
        assert_eq!(
            s.authenticate(&cfg, b"\0alice\0alice-secret", "n"),
            Err(ErrorCode::IllegalSaslState)
        );
        assert_eq!(s.handshake(&cfg, "GSSAPI", 1).0, ErrorCode::UnsupportedSaslMechanism);
        let mut plaintext = SaslState::for_listener(false);
        assert_eq!(plaintext.handshake(&cfg, "PLAIN", 1).0, ErrorCode::IllegalSaslState);
        assert!(plaintext.allows(metadata::API_KEY));
    }

    #[test]
    fn scram_login_through_the_state_machine_and_a_wrong_password_fails() {
        use crate::security::{SaslClient, SaslCredentials};
        let cfg = config();
        for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            cfg.set_scram(
                "bob",
                m,
                Some(ScramCredential::from_password(m, "bob-pw", b"salt", 4096)),
            );
        }
        let mut cfg = cfg;
        cfg.mechanisms = Mechanism::ALL.to_vec();
        for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            for (password, ok) in [("bob-pw", true), ("nope", false)] {
                let mut s = SaslState::for_listener(true);
                assert_eq!(s.handshake(&cfg, m.name(), 1).0, ErrorCode::None);
                let creds = SaslCredentials {
                    mechanism: m,
                    user: "bob".into(),
                    password: password.into(),
                };
                let mut client = SaslClient::new(creds, "cnonce".into());
                let first = client.first();
                let AuthStep::Continue(server_first) = s.authenticate(&cfg, &first, "snonce").unwrap() else {
                    panic!("{m}: no server-first")
                };
                let fin = client.next(&server_first).unwrap().expect("client final");
                match s.authenticate(&cfg, &fin, "unused").unwrap() {
                    AuthStep::Done { token, principal } => {
                        assert!(ok, "{m}: wrong password accepted");
                        assert_eq!(principal, Principal::user("bob"));
                        assert_eq!(client.next(&token), Ok(None), "{m}: server signature verified");
                        assert!(s.allows(metadata::API_KEY));
                    }
                    AuthStep::Failed { reason, user } => {
                        assert!(!ok, "{m}: refused: {reason}");
                        assert_eq!(user.as_deref(), Some("bob"));
                        assert!(!s.allows(metadata::API_KEY));
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        // Unknown users fail at the first message; removing a credential refuses new logins.
        cfg.set_scram("bob", Mechanism::ScramSha256, None);
        let mut s = SaslState::for_listener(true);
        s.handshake(&cfg, "SCRAM-SHA-256", 1);
        let step = s.authenticate(&cfg, b"n,,n=bob,r=abc", "x").unwrap();
        assert!(matches!(step, AuthStep::Failed { .. }), "{step:?}");
        assert_eq!(
            cfg.scram_users(),
            vec![("bob".to_string(), Mechanism::ScramSha512, 4096)]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1_000))]
        /// Any sequence of arbitrary tokens, in any mechanism, never panics and never
        /// authenticates without a credential's proof.
        #[test]
        fn arbitrary_token_sequences_never_panic_or_authenticate(
            mechanism in 0usize..3,
            tokens in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80), 1..4),
        ) {
            let mut cfg = config();
            cfg.mechanisms = Mechanism::ALL.to_vec();
            cfg.set_scram("alice", Mechanism::ScramSha256, Some(ScramCredential {
                salt: vec![1], stored_key: vec![2; 32], server_key: vec![3; 32], iterations: 4096,
            }));
            let mut s = SaslState::for_listener(true);
            s.handshake(&cfg, Mechanism::ALL[mechanism].name(), 1);
            for t in &tokens {
                if let Ok(AuthStep::Done { .. }) = s.authenticate(&cfg, t, "n") {
                    proptest::prop_assert!(false, "authenticated by {:?}", tokens);
                }
            }
        }
    }

    #[test]
    fn failures_are_delayed_more_for_a_user_who_keeps_failing() {
        let cfg = config();
        let delays: Vec<u64> = (0..10).map(|_| cfg.failure_delay_ms("alice")).collect();
        assert_eq!(&delays[..4], &[100, 200, 400, 800]);
        assert_eq!(*delays.last().unwrap(), FAILURE_DELAY_MS_MAX);
        assert_eq!(cfg.failure_delay_ms("bob"), 100, "per user");
        cfg.succeeded("alice");
        assert_eq!(cfg.failure_delay_ms("alice"), 100, "reset by a success");
    }
}
