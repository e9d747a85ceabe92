//! Mutual authentication on the coordinator's listener: brokers (clients) and coordinators (Raft
//! peers) prove, when a connection opens, that they hold the cluster secret, before any request
//! or peer frame on it is accepted.
//!
//! The handshake (every frame tagged [`FrameKind::Auth`](super::wire::FrameKind::Auth)); the
//! connector C opened the connection, the acceptor A accepted it:
//!
//! 1. C → A `Hello { version, role, nonce_c }` (16 random bytes from the runtime's stream).
//! 2. A → C `Challenge { nonce_a, mac_a }`, `mac_a = HMAC-SHA256(secret, label_a ‖ role ‖ nonce_c ‖ nonce_a)`,
//!    or `Refused { reason }` (A has no secret, or the version is unknown).
//! 3. C checks `mac_a` (in constant time): a mismatch means A does not hold our secret, and C
//!    closes. Else C → A `Proof { mac_c }`, with the connector's label `label_c`.
//! 4. A checks `mac_c` and answers `Accepted`, or `Refused` and closes.
//!
//! Both nonces go into both MACs, and the two directions use different labels, so an answer can
//! neither be replayed on another connection nor reflected back to its sender. The secret itself
//! never crosses the wire. What this does not give: confidentiality or integrity of the frames
//! after the handshake (the port is not encrypted; an attacker on the path can still read it,
//! and hijack an authenticated connection). That needs TLS on the coordinator port.
//!
//! Fault model: every frame comes from the network and may be anything; decoding is bounded and
//! a malformed frame fails the handshake (the caller closes the connection), never panics.

use std::sync::Arc;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

use super::codec::{Reader, Writer};
use super::wire::FrameKind;
use crate::runtime::{Connection, NetError, Runtime};

/// A cluster secret shorter than this is refused: it must not be guessable.
pub const SECRET_BYTES_MIN: usize = 16;
/// The longest cluster secret accepted (HMAC takes any length; this bounds the config).
pub const SECRET_BYTES_MAX: usize = 4096;
/// A whole handshake (every step, both sides) must finish within this time.
pub const HANDSHAKE_MS_MAX: u64 = 5_000;
/// A refusal's reason is cut to this many bytes on the wire.
const REASON_BYTES_MAX: usize = 256;
const VERSION: u8 = 1;
const NONCE_BYTES: usize = 16;
const MAC_BYTES: usize = 32;
const LABEL_ACCEPTOR: &[u8] = b"gregor coordinator auth v1: acceptor";
const LABEL_CONNECTOR: &[u8] = b"gregor coordinator auth v1: connector";

const STEP_HELLO: u8 = 1;
const STEP_CHALLENGE: u8 = 2;
const STEP_PROOF: u8 = 3;
const STEP_ACCEPTED: u8 = 4;
const STEP_REFUSED: u8 = 5;

/// The secret the coordinators and brokers of one cluster share. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Arc<[u8]>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret(<{} bytes, not shown>)", self.0.len())
    }
}

impl ClusterSecret {
    /// A secret of `SECRET_BYTES_MIN..=SECRET_BYTES_MAX` bytes.
    pub fn new(bytes: &[u8]) -> Result<ClusterSecret, String> {
        if bytes.len() < SECRET_BYTES_MIN {
            return Err(format!(
                "the cluster secret has {} bytes; at least {SECRET_BYTES_MIN} are needed",
                bytes.len()
            ));
        }
        if bytes.len() > SECRET_BYTES_MAX {
            return Err(format!(
                "the cluster secret has {} bytes; at most {SECRET_BYTES_MAX} are accepted",
                bytes.len()
            ));
        }
        Ok(ClusterSecret(Arc::from(bytes)))
    }
}

/// What the connector says it is. Raft peer frames are accepted only on a `Peer` connection,
/// requests only on a `Client` one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthRole {
    Peer = 1,
    Client = 2,
}

impl AuthRole {
    fn from_u8(v: u8) -> Option<AuthRole> {
        match v {
            1 => Some(AuthRole::Peer),
            2 => Some(AuthRole::Client),
            _ => None,
        }
    }
}

/// Why a handshake failed. None of them carries the secret or a MAC.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuthError {
    #[error("refused by the other side: {0}")]
    Refused(String),
    #[error("the coordinator's proof does not match this process's cluster secret (the secrets differ)")]
    AcceptorProofMismatch,
    #[error("the connector's proof does not match this coordinator's cluster secret (the secrets differ)")]
    ConnectorProofMismatch,
    #[error("a {0} frame before authentication: this coordinator requires the cluster secret")]
    Unauthenticated(&'static str),
    #[error("the connector asked for authentication but this coordinator has no cluster secret configured")]
    NotConfigured,
    #[error("malformed handshake frame: {0}")]
    Malformed(&'static str),
    #[error("network: {0}")]
    Net(NetError),
    #[error("connection closed during the handshake")]
    Closed,
    #[error("the handshake did not finish within {HANDSHAKE_MS_MAX} ms")]
    TimedOut,
}

type Nonce = [u8; NONCE_BYTES];

fn nonce<R: Runtime>(rt: &R) -> Nonce {
    let mut n = [0u8; NONCE_BYTES];
    n[..8].copy_from_slice(&rt.random_u64().to_be_bytes());
    n[8..].copy_from_slice(&rt.random_u64().to_be_bytes());
    n
}

fn keyed(secret: &ClusterSecret, label: &[u8], role: AuthRole, nonce_c: &Nonce, nonce_a: &Nonce) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret.0).expect("HMAC takes keys of any length");
    mac.update(label);
    mac.update(&[role as u8]);
    mac.update(nonce_c);
    mac.update(nonce_a);
    mac
}

fn mac(secret: &ClusterSecret, label: &[u8], role: AuthRole, nonce_c: &Nonce, nonce_a: &Nonce) -> Vec<u8> {
    keyed(secret, label, role, nonce_c, nonce_a)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// Whether `tag` is the MAC; compared in constant time (`Mac::verify_slice`).
fn verify(secret: &ClusterSecret, label: &[u8], role: AuthRole, nonce_c: &Nonce, nonce_a: &Nonce, tag: &[u8]) -> bool {
    keyed(secret, label, role, nonce_c, nonce_a).verify_slice(tag).is_ok()
}

fn frame(step: u8, body: impl FnOnce(&mut Writer)) -> Bytes {
    let mut w = Writer::default();
    w.u8(FrameKind::Auth as u8);
    w.u8(step);
    body(&mut w);
    Bytes::from(w.buf)
}

/// A `Refused` frame (the reason cut to a bounded length at a character boundary).
pub fn refusal(reason: &str) -> Bytes {
    let mut cut = reason.len().min(REASON_BYTES_MAX);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    frame(STEP_REFUSED, |w| w.str(&reason[..cut]))
}

/// A `Hello` as a connector would send it (tests forge handshakes with these).
#[cfg(test)]
pub(super) fn hello_frame(role: AuthRole, nonce_c: [u8; NONCE_BYTES]) -> Bytes {
    frame(STEP_HELLO, |w| {
        w.u8(VERSION);
        w.u8(role as u8);
        w.buf.extend_from_slice(&nonce_c);
    })
}

/// A `Proof` carrying `tag`, right or not.
#[cfg(test)]
pub(super) fn proof_frame(tag: &[u8]) -> Bytes {
    frame(STEP_PROOF, |w| w.buf.extend_from_slice(tag))
}

/// Whether `frame` is a handshake frame (tag byte).
pub fn is_auth_frame(frame: &[u8]) -> bool {
    frame.first() == Some(&(FrameKind::Auth as u8))
}

/// The reason of a `Refused` frame, if `frame` is one.
pub fn refusal_reason(frame: &[u8]) -> Option<String> {
    let mut r = Reader::new(frame);
    if r.u8().ok()? != FrameKind::Auth as u8 || r.u8().ok()? != STEP_REFUSED {
        return None;
    }
    let reason = r.string("refusal reason", REASON_BYTES_MAX).ok()?;
    r.finish().ok()?;
    Some(reason)
}

fn fixed<const N: usize>(r: &mut Reader<'_>, what: &'static str) -> Result<[u8; N], AuthError> {
    let mut out = [0u8; N];
    for b in out.iter_mut() {
        *b = r.u8().map_err(|_| AuthError::Malformed(what))?;
    }
    Ok(out)
}

/// Opens a step-`step` frame, or turns a `Refused` into its error.
fn expect_step<'a>(frame: &'a [u8], step: u8) -> Result<Reader<'a>, AuthError> {
    if let Some(reason) = refusal_reason(frame) {
        return Err(AuthError::Refused(reason));
    }
    let mut r = Reader::new(frame);
    if r.u8().ok() != Some(FrameKind::Auth as u8) {
        return Err(AuthError::Malformed("not a handshake frame"));
    }
    if r.u8().ok() != Some(step) {
        return Err(AuthError::Malformed("unexpected handshake step"));
    }
    Ok(r)
}

async fn recv<C: Connection>(conn: &mut C) -> Result<Bytes, AuthError> {
    match conn.recv().await {
        Ok(Some(f)) => Ok(f),
        Ok(None) => Err(AuthError::Closed),
        Err(e) => Err(AuthError::Net(e)),
    }
}

async fn send<C: Connection>(conn: &mut C, frame: Bytes) -> Result<(), AuthError> {
    conn.send(frame).await.map_err(AuthError::Net)
}

/// The connector's side: proves `role` with `secret` on a freshly opened `conn` and checks that
/// the acceptor holds the same secret. On `Err` the caller must close the connection. Not
/// bounded in time: callers run it under their own timeout (at most [`HANDSHAKE_MS_MAX`]).
pub async fn authenticate_to<R: Runtime, C: Connection>(
    rt: &R,
    conn: &mut C,
    secret: &ClusterSecret,
    role: AuthRole,
) -> Result<(), AuthError> {
    let nonce_c = nonce(rt);
    send(
        conn,
        frame(STEP_HELLO, |w| {
            w.u8(VERSION);
            w.u8(role as u8);
            w.buf.extend_from_slice(&nonce_c);
        }),
    )
    .await?;
    let challenge = recv(conn).await?;
    let mut r = expect_step(&challenge, STEP_CHALLENGE)?;
    let nonce_a: Nonce = fixed(&mut r, "challenge nonce")?;
    let mac_a: [u8; MAC_BYTES] = fixed(&mut r, "challenge MAC")?;
    r.finish()
        .map_err(|_| AuthError::Malformed("challenge has trailing bytes"))?;
    if !verify(secret, LABEL_ACCEPTOR, role, &nonce_c, &nonce_a, &mac_a) {
        let _ = send(
            conn,
            refusal("the coordinator's proof does not match our cluster secret"),
        )
        .await;
        return Err(AuthError::AcceptorProofMismatch);
    }
    let mac_c = mac(secret, LABEL_CONNECTOR, role, &nonce_c, &nonce_a);
    send(conn, frame(STEP_PROOF, |w| w.buf.extend_from_slice(&mac_c))).await?;
    let verdict = recv(conn).await?;
    let r = expect_step(&verdict, STEP_ACCEPTED)?;
    r.finish()
        .map_err(|_| AuthError::Malformed("accepted has trailing bytes"))?;
    Ok(())
}

/// The acceptor's side, given the connection's first frame `hello`: with a `secret`, runs the
/// handshake and returns the role proven; without, refuses a handshake (the connector wants an
/// authenticated coordinator, and this is not one). A frame that is not a `Hello` is refused as
/// [`AuthError::Unauthenticated`]. Every failure is answered with a `Refused` frame (best
/// effort) before `Err`; the caller then closes the connection, having applied nothing.
pub async fn authenticate_from<R: Runtime, C: Connection>(
    rt: &R,
    conn: &mut C,
    secret: Option<&ClusterSecret>,
    hello: &[u8],
) -> Result<AuthRole, AuthError> {
    let result = accept(rt, conn, secret, hello).await;
    if let Err(e) = &result {
        if !matches!(e, AuthError::Net(_) | AuthError::Closed | AuthError::Refused(_)) {
            let _ = send(conn, refusal(&e.to_string())).await;
        }
    }
    result
}

async fn accept<R: Runtime, C: Connection>(
    rt: &R,
    conn: &mut C,
    secret: Option<&ClusterSecret>,
    hello: &[u8],
) -> Result<AuthRole, AuthError> {
    if !is_auth_frame(hello) {
        return Err(AuthError::Unauthenticated(match hello.first() {
            Some(&t) if t == FrameKind::Peer as u8 => "peer",
            Some(&t) if t == FrameKind::Request as u8 => "request",
            _ => "unknown",
        }));
    }
    let Some(secret) = secret else {
        return Err(AuthError::NotConfigured);
    };
    let mut r = expect_step(hello, STEP_HELLO)?;
    let version = r.u8().map_err(|_| AuthError::Malformed("hello version"))?;
    if version != VERSION {
        return Err(AuthError::Malformed("unknown handshake version"));
    }
    let role = r
        .u8()
        .ok()
        .and_then(AuthRole::from_u8)
        .ok_or(AuthError::Malformed("hello role"))?;
    let nonce_c: Nonce = fixed(&mut r, "hello nonce")?;
    r.finish()
        .map_err(|_| AuthError::Malformed("hello has trailing bytes"))?;
    let nonce_a = nonce(rt);
    let mac_a = mac(secret, LABEL_ACCEPTOR, role, &nonce_c, &nonce_a);
    send(
        conn,
        frame(STEP_CHALLENGE, |w| {
            w.buf.extend_from_slice(&nonce_a);
            w.buf.extend_from_slice(&mac_a);
        }),
    )
    .await?;
    let proof = recv(conn).await?;
    let mut r = expect_step(&proof, STEP_PROOF)?;
    let mac_c: [u8; MAC_BYTES] = fixed(&mut r, "proof MAC")?;
    r.finish()
        .map_err(|_| AuthError::Malformed("proof has trailing bytes"))?;
    if !verify(secret, LABEL_CONNECTOR, role, &nonce_c, &nonce_a, &mac_c) {
        return Err(AuthError::ConnectorProofMismatch);
    }
    send(conn, frame(STEP_ACCEPTED, |_| {})).await?;
    Ok(role)
}
