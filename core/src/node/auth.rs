//! The node's side of SASL: decides, per request, whether the connection may be served yet, and
//! answers SaslHandshake / SaslAuthenticate (and the bare token frames that follow a v0
//! handshake) from the connection's [`SaslState`]. The state machine itself is
//! `security::sasl`; this file only moves its answers onto the wire, waits out the failure
//! delay (the rate limit) and logs, without secrets.

use std::time::Duration;

use bytes::Bytes;

use super::{NodeConfig, Outcome};
use crate::protocol::api::sasl_authenticate::SaslAuthenticateResponse;
use crate::protocol::api::sasl_handshake::SaslHandshakeResponse;
use crate::protocol::{encode_response, Request, RequestHeader};
use crate::runtime::Runtime;
use crate::security::{AuthStep, ConnContext, SaslConfig};
use crate::ErrorCode;

/// `Some(outcome)` when the request is a SASL one (answered here) or is not allowed before
/// authentication (closed); `None` to serve it as usual.
pub(super) async fn gate<R: Runtime>(
    rt: &R,
    config: &NodeConfig,
    header: &RequestHeader,
    request: &Request,
    ctx: &mut ConnContext,
) -> Option<Outcome> {
    let version = header.api_version;
    match request {
        Request::SaslHandshake(req) => {
            let no_sasl = SaslConfig::default();
            let sasl = config.sasl.as_deref().unwrap_or(&no_sasl);
            let (error, mechanisms) = ctx.sasl.handshake(sasl, &req.mechanism, version);
            let body = SaslHandshakeResponse {
                error_code: error.code(),
                mechanisms,
            }
            .encode(version);
            let reply = encode_response(header, &body);
            Some(match error {
                ErrorCode::None => Outcome::Reply(reply),
                // Kafka answers, then closes: the client cannot go on on this connection.
                _ => Outcome::ReplyThenClose(reply, format!("SaslHandshake {:?}: {error:?}", req.mechanism)),
            })
        }
        Request::SaslAuthenticate(req) => {
            let answer = |error: ErrorCode, message: Option<String>, token: Vec<u8>| {
                let body = SaslAuthenticateResponse {
                    error_code: error.code(),
                    error_message: message,
                    auth_bytes: Bytes::from(token),
                    session_lifetime_ms: 0,
                }
                .encode(version);
                encode_response(header, &body)
            };
            let Some(sasl) = config.sasl.as_deref() else {
                let reply = answer(ErrorCode::IllegalSaslState, None, Vec::new());
                return Some(Outcome::ReplyThenClose(
                    reply,
                    "SaslAuthenticate on a listener without SASL".into(),
                ));
            };
            Some(match ctx.sasl.authenticate(sasl, &req.auth_bytes, &nonce(rt)) {
                Err(error) => Outcome::ReplyThenClose(
                    answer(error, None, Vec::new()),
                    "SaslAuthenticate before SaslHandshake".into(),
                ),
                Ok(AuthStep::Continue(token)) => Outcome::Reply(answer(ErrorCode::None, None, token)),
                Ok(AuthStep::Done { token, principal }) => {
                    tracing::info!(peer = %ctx.peer, %principal, "authenticated");
                    ctx.principal = principal;
                    Outcome::Reply(answer(ErrorCode::None, None, token))
                }
                Ok(AuthStep::Failed { reason, user }) => {
                    fail_delay(rt, sasl, &ctx.peer, &reason, user.as_deref()).await;
                    let reply = answer(ErrorCode::SaslAuthenticationFailed, Some(reason.clone()), Vec::new());
                    Outcome::ReplyThenClose(reply, reason)
                }
            })
        }
        _ if !ctx.sasl.allows(header.api_key) => Some(Outcome::Close(format!(
            "api key {} before SASL authentication",
            header.api_key
        ))),
        _ => None,
    }
}

/// A bare token frame after a v0 SaslHandshake: answered with a bare token frame, or, on
/// failure, by closing (the legacy protocol has no error field).
pub(super) async fn bare_token<R: Runtime>(
    rt: &R,
    config: &NodeConfig,
    frame: &Bytes,
    ctx: &mut ConnContext,
) -> Outcome {
    let Some(sasl) = config.sasl.as_deref() else {
        return Outcome::Close("SASL token on a listener without SASL".into());
    };
    match ctx.sasl.authenticate(sasl, frame, &nonce(rt)) {
        Err(error) => Outcome::Close(format!("SASL token out of order: {error:?}")),
        Ok(AuthStep::Continue(token)) => Outcome::Reply(Bytes::from(token)),
        Ok(AuthStep::Done { token, principal }) => {
            tracing::info!(peer = %ctx.peer, %principal, "authenticated");
            ctx.principal = principal;
            Outcome::Reply(Bytes::from(token))
        }
        Ok(AuthStep::Failed { reason, user }) => {
            fail_delay(rt, sasl, &ctx.peer, &reason, user.as_deref()).await;
            Outcome::Close(reason)
        }
    }
}

/// A fresh SCRAM server nonce: 128 random bits from the runtime, in hex.
fn nonce<R: Runtime>(rt: &R) -> String {
    format!("{:016x}{:016x}", rt.random_u64(), rt.random_u64())
}

/// Logs a failed login (reason and user name only) and waits out its rate-limit delay.
async fn fail_delay<R: Runtime>(rt: &R, sasl: &SaslConfig, peer: &str, reason: &str, user: Option<&str>) {
    // Unnamed (malformed) attempts share one bucket, so they are limited too.
    let delay_ms = sasl.failure_delay_ms(user.unwrap_or(""));
    tracing::warn!(%peer, user = user.unwrap_or("-"), %reason, delay_ms, "SASL authentication failed");
    rt.sleep(Duration::from_millis(delay_ms)).await;
}
