//! SaslHandshake (key 17), v0–v1: the client names the SASL mechanism it wants; the broker
//! answers whether it is enabled and lists the ones that are. Never flexible.
//!
//! v0 is the legacy form: after it the SASL tokens travel as bare length-prefixed frames with no
//! Kafka header (see `security::sasl`); v1 carries them in SaslAuthenticate requests.

use bytes::Bytes;

use crate::protocol::reader::{Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 17;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 1;
/// No version of SaslHandshake is flexible.
pub const FLEXIBLE_MIN: i16 = i16::MAX;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SaslHandshakeRequest {
    pub mechanism: String,
}

impl SaslHandshakeRequest {
    pub fn decode(_version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let mechanism = r.string(false, "mechanism")?;
        Ok(SaslHandshakeRequest { mechanism })
    }

    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let mut w = Writer::new();
        w.string(false, &self.mechanism);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SaslHandshakeResponse {
    pub error_code: i16,
    /// The mechanisms the broker has enabled.
    pub mechanisms: Vec<String>,
}

impl SaslHandshakeResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let mut w = Writer::new();
        w.i16(self.error_code);
        w.array(false, &self.mechanisms, |w, m| w.string(false, m));
        w.finish()
    }

    pub fn decode(_version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let error_code = r.i16()?;
        let mechanisms = r.array(false, 2, |r| r.string(false, "mechanism"))?;
        Ok(SaslHandshakeResponse { error_code, mechanisms })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;

    pub(crate) fn sample() -> kp::SaslHandshakeRequest {
        let mut sent = kp::SaslHandshakeRequest::default();
        sent.mechanism = s("SCRAM-SHA-256");
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        (VERSION_MIN..=VERSION_MAX)
            .map(|v| request_frame(API_KEY, v, &sample()))
            .collect()
    }

    pub(crate) fn client_request(_v: i16) -> SaslHandshakeRequest {
        SaslHandshakeRequest {
            mechanism: "PLAIN".into(),
        }
    }

    pub(crate) fn client_response(_v: i16) -> SaslHandshakeResponse {
        SaslHandshakeResponse {
            error_code: 0,
            mechanisms: vec!["PLAIN".into()],
        }
    }

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample()));
            let Request::SaslHandshake(req) = req else {
                panic!("wrong api: {req:?}")
            };
            assert_eq!(req.mechanism, "SCRAM-SHA-256", "v{v}");
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = SaslHandshakeRequest {
                mechanism: "PLAIN".into(),
            };
            let theirs: kp::SaslHandshakeRequest =
                client_round_trip(v, &req, req.encode(v), SaslHandshakeRequest::decode);
            assert_eq!(&*theirs.mechanism, "PLAIN");
            let resp = SaslHandshakeResponse {
                error_code: crate::ErrorCode::UnsupportedSaslMechanism.code(),
                mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-512".into()],
            };
            let theirs: kp::SaslHandshakeResponse =
                client_round_trip(v, &resp, resp.encode(v), SaslHandshakeResponse::decode);
            assert_eq!(theirs.error_code, 33);
            assert_eq!(theirs.mechanisms.len(), 2);
        }
    }
}
