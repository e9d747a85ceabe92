//! AlterUserScramCredentials (key 51), v0, flexible (KIP-554): deletions (user, mechanism) and
//! upsertions (user, mechanism, iterations, salt, salted password). The client salts and
//! iterates; the password itself never travels, and the broker keeps only the StoredKey and
//! ServerKey it derives from the salted password. Codes are judged by the handler, so decoding
//! never fails on a mechanism it does not know.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 51;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 0;
pub const FLEXIBLE_MIN: i16 = 0;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AlterUserScramCredentialsRequest {
    pub deletions: Vec<ScramCredentialDeletion>,
    pub upsertions: Vec<ScramCredentialUpsertion>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScramCredentialDeletion {
    pub name: String,
    pub mechanism: i8,
}

#[derive(Clone, PartialEq, Eq, Default)]
pub struct ScramCredentialUpsertion {
    pub name: String,
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Bytes,
    pub salted_password: Bytes,
}

/// Secrets stay out of logs and panics.
impl std::fmt::Debug for ScramCredentialUpsertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredentialUpsertion")
            .field("name", &self.name)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl AlterUserScramCredentialsRequest {
    pub fn decode(_version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = true;
        let string = min_bytes::string(flex);
        let tags = min_bytes::tags(flex);
        let deletions = r.array(flex, string + 1 + tags, |r| {
            let d = ScramCredentialDeletion {
                name: r.string(flex, "deletions.name")?,
                mechanism: r.i8()?,
            };
            r.skip_tagged_fields(flex)?;
            Ok(d)
        })?;
        let upsertions = r.array(flex, string + 5 + 2 * string + tags, |r| {
            let u = ScramCredentialUpsertion {
                name: r.string(flex, "upsertions.name")?,
                mechanism: r.i8()?,
                iterations: r.i32()?,
                salt: r.bytes(flex, "upsertions.salt")?,
                salted_password: r.bytes(flex, "upsertions.salted_password")?,
            };
            r.skip_tagged_fields(flex)?;
            Ok(u)
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(AlterUserScramCredentialsRequest { deletions, upsertions })
    }

    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = true;
        let mut w = Writer::new();
        w.array(flex, &self.deletions, |w, d| {
            w.string(flex, &d.name);
            w.i8(d.mechanism);
            w.no_tagged_fields(flex);
        });
        w.array(flex, &self.upsertions, |w, u| {
            w.string(flex, &u.name);
            w.i8(u.mechanism);
            w.i32(u.iterations);
            w.bytes(flex, &u.salt);
            w.bytes(flex, &u.salted_password);
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AlterUserScramCredentialsResponse {
    pub throttle_time_ms: i32,
    pub results: Vec<AlterUserScramCredentialsResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AlterUserScramCredentialsResult {
    pub user: String,
    pub error_code: i16,
    pub error_message: Option<String>,
}

impl AlterUserScramCredentialsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = true;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.array(flex, &self.results, |w, res| {
            w.string(flex, &res.user);
            w.i16(res.error_code);
            w.nullable_string(flex, res.error_message.as_deref());
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }

    pub fn decode(_version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = true;
        let string = min_bytes::string(flex);
        let throttle_time_ms = r.i32()?;
        let results = r.array(flex, 2 * string + 2 + min_bytes::tags(flex), |r| {
            let res = AlterUserScramCredentialsResult {
                user: r.string(flex, "results.user")?,
                error_code: r.i16()?,
                error_message: r.nullable_string(flex)?,
            };
            r.skip_tagged_fields(flex)?;
            Ok(res)
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(AlterUserScramCredentialsResponse {
            throttle_time_ms,
            results,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;
    use kafka_protocol::messages::alter_user_scram_credentials_request as kq;

    pub(crate) fn sample(_v: i16) -> kp::AlterUserScramCredentialsRequest {
        let mut sent = kp::AlterUserScramCredentialsRequest::default();
        let mut d = kq::ScramCredentialDeletion::default();
        d.name = s("bob");
        d.mechanism = 2;
        d.unknown_tagged_fields = unknown_tags();
        let mut u = kq::ScramCredentialUpsertion::default();
        u.name = s("alice");
        u.mechanism = 1;
        u.iterations = 8192;
        u.salt = Bytes::from_static(b"salt");
        u.salted_password = Bytes::from_static(&[7; 32]);
        sent.deletions = vec![d];
        sent.upsertions = vec![u];
        sent.unknown_tagged_fields = unknown_tags();
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        vec![request_frame(API_KEY, 0, &sample(0))]
    }

    #[test]
    fn request_round_trips() {
        let (_, req) = decode_frame(&request_frame(API_KEY, 0, &sample(0)));
        let Request::AlterUserScramCredentials(req) = req else {
            panic!("wrong api: {req:?}")
        };
        assert_eq!(req, client_request(0));
        assert!(
            !format!("{:?}", req.upsertions[0]).contains("salt"),
            "no secrets in Debug"
        );
    }

    pub(crate) fn client_request(_v: i16) -> AlterUserScramCredentialsRequest {
        AlterUserScramCredentialsRequest {
            deletions: vec![ScramCredentialDeletion {
                name: "bob".into(),
                mechanism: 2,
            }],
            upsertions: vec![ScramCredentialUpsertion {
                name: "alice".into(),
                mechanism: 1,
                iterations: 8192,
                salt: Bytes::from_static(b"salt"),
                salted_password: Bytes::from_static(&[7; 32]),
            }],
        }
    }

    pub(crate) fn client_response(_v: i16) -> AlterUserScramCredentialsResponse {
        AlterUserScramCredentialsResponse {
            throttle_time_ms: 0,
            results: vec![
                AlterUserScramCredentialsResult {
                    user: "alice".into(),
                    error_code: 0,
                    error_message: None,
                },
                AlterUserScramCredentialsResult {
                    user: "bob".into(),
                    error_code: 91,
                    error_message: Some("no credential".into()),
                },
            ],
        }
    }

    #[test]
    fn client_codec_round_trips() {
        let req = client_request(0);
        let theirs: kp::AlterUserScramCredentialsRequest =
            client_round_trip(0, &req, req.encode(0), AlterUserScramCredentialsRequest::decode);
        assert_eq!(theirs.upsertions[0].iterations, 8192);
        let resp = client_response(0);
        let theirs: kp::AlterUserScramCredentialsResponse =
            client_round_trip(0, &resp, resp.encode(0), AlterUserScramCredentialsResponse::decode);
        assert_eq!(theirs.results[1].error_code, 91);
    }
}
