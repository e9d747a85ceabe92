//! SaslAuthenticate (key 36), v0–v2: one SASL token each way, after a v1 SaslHandshake.
//! Flexible from v2. `session_lifetime_ms` (v1+, KIP-368) is 0: sessions do not expire.

use bytes::Bytes;

use crate::protocol::reader::{Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 36;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 2;
pub const FLEXIBLE_MIN: i16 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SaslAuthenticateRequest {
    /// The client's SASL token, as the mechanism defines it (untrusted).
    pub auth_bytes: Bytes,
}

impl SaslAuthenticateRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let auth_bytes = r.bytes(flex, "auth_bytes")?;
        r.skip_tagged_fields(flex)?;
        Ok(SaslAuthenticateRequest { auth_bytes })
    }

    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.bytes(flex, &self.auth_bytes);
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SaslAuthenticateResponse {
    pub error_code: i16,
    pub error_message: Option<String>,
    /// The server's SASL token.
    pub auth_bytes: Bytes,
    /// v1+: how long the session may last before the client must re-authenticate; 0 = forever.
    pub session_lifetime_ms: i64,
}

impl SaslAuthenticateResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i16(self.error_code);
        w.nullable_string(flex, self.error_message.as_deref());
        w.bytes(flex, &self.auth_bytes);
        if version >= 1 {
            w.i64(self.session_lifetime_ms);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }

    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let error_code = r.i16()?;
        let error_message = r.nullable_string(flex)?;
        let auth_bytes = r.bytes(flex, "auth_bytes")?;
        let session_lifetime_ms = if version >= 1 { r.i64()? } else { 0 };
        r.skip_tagged_fields(flex)?;
        Ok(SaslAuthenticateResponse {
            error_code,
            error_message,
            auth_bytes,
            session_lifetime_ms,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;

    pub(crate) fn sample(v: i16) -> kp::SaslAuthenticateRequest {
        let mut sent = kp::SaslAuthenticateRequest::default();
        sent.auth_bytes = Bytes::from_static(b"\0alice\0secret");
        if v >= FLEXIBLE_MIN {
            sent.unknown_tagged_fields = unknown_tags();
        }
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        (VERSION_MIN..=VERSION_MAX)
            .map(|v| request_frame(API_KEY, v, &sample(v)))
            .collect()
    }

    pub(crate) fn client_request(_v: i16) -> SaslAuthenticateRequest {
        SaslAuthenticateRequest {
            auth_bytes: Bytes::from_static(b"\0u\0p"),
        }
    }

    pub(crate) fn client_response(v: i16) -> SaslAuthenticateResponse {
        SaslAuthenticateResponse {
            error_code: 58,
            error_message: Some("no".into()),
            auth_bytes: Bytes::from_static(b"v=x"),
            session_lifetime_ms: if v >= 1 { 1 } else { 0 },
        }
    }

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::SaslAuthenticate(req) = req else {
                panic!("wrong api: {req:?}")
            };
            assert_eq!(&req.auth_bytes[..], b"\0alice\0secret", "v{v}");
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = SaslAuthenticateRequest {
                auth_bytes: Bytes::from_static(b"n,,n=user,r=abc"),
            };
            let theirs: kp::SaslAuthenticateRequest =
                client_round_trip(v, &req, req.encode(v), SaslAuthenticateRequest::decode);
            assert_eq!(&theirs.auth_bytes[..], b"n,,n=user,r=abc");
            let resp = SaslAuthenticateResponse {
                error_code: crate::ErrorCode::SaslAuthenticationFailed.code(),
                error_message: Some("Authentication failed".into()),
                auth_bytes: Bytes::from_static(b"e=other-error"),
                session_lifetime_ms: if v >= 1 { 60_000 } else { 0 },
            };
            let theirs: kp::SaslAuthenticateResponse =
                client_round_trip(v, &resp, resp.encode(v), SaslAuthenticateResponse::decode);
            assert_eq!(theirs.error_code, 58);
            assert_eq!(theirs.session_lifetime_ms, if v >= 1 { 60_000 } else { 0 });
        }
    }
}
