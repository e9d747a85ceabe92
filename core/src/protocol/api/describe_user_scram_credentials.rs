//! DescribeUserScramCredentials (key 50), v0, flexible (KIP-554): for each named user (or every
//! user, a null list) the SCRAM mechanisms it has and their iteration counts; never salts or keys.
//! Mechanism codes are Kafka's `ScramMechanism` INT8s (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 50;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 0;
pub const FLEXIBLE_MIN: i16 = 0;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeUserScramCredentialsRequest {
    /// `None`: every user with a credential.
    pub users: Option<Vec<String>>,
}

impl DescribeUserScramCredentialsRequest {
    pub fn decode(_version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = true;
        let users = r.nullable_array(flex, min_bytes::string(flex) + min_bytes::tags(flex), |r| {
            let name = r.string(flex, "users.name")?;
            r.skip_tagged_fields(flex)?;
            Ok(name)
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(DescribeUserScramCredentialsRequest { users })
    }

    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = true;
        let mut w = Writer::new();
        w.nullable_array(flex, self.users.as_deref(), |w, name| {
            w.string(flex, name);
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeUserScramCredentialsResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub results: Vec<UserScramCredentials>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserScramCredentials {
    pub user: String,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub credential_infos: Vec<CredentialInfo>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CredentialInfo {
    pub mechanism: i8,
    pub iterations: i32,
}

impl DescribeUserScramCredentialsResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = true;
        let mut w = Writer::new();
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code);
        w.nullable_string(flex, self.error_message.as_deref());
        w.array(flex, &self.results, |w, res| {
            w.string(flex, &res.user);
            w.i16(res.error_code);
            w.nullable_string(flex, res.error_message.as_deref());
            w.array(flex, &res.credential_infos, |w, c| {
                w.i8(c.mechanism);
                w.i32(c.iterations);
                w.no_tagged_fields(flex);
            });
            w.no_tagged_fields(flex);
        });
        w.no_tagged_fields(flex);
        w.finish()
    }

    pub fn decode(_version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = true;
        let string = min_bytes::string(flex);
        let tags = min_bytes::tags(flex);
        let throttle_time_ms = r.i32()?;
        let error_code = r.i16()?;
        let error_message = r.nullable_string(flex)?;
        let result_min = 2 * string + 2 + min_bytes::array(flex) + tags;
        let results = r.array(flex, result_min, |r| {
            let user = r.string(flex, "results.user")?;
            let error_code = r.i16()?;
            let error_message = r.nullable_string(flex)?;
            let credential_infos = r.array(flex, 5 + tags, |r| {
                let c = CredentialInfo {
                    mechanism: r.i8()?,
                    iterations: r.i32()?,
                };
                r.skip_tagged_fields(flex)?;
                Ok(c)
            })?;
            r.skip_tagged_fields(flex)?;
            Ok(UserScramCredentials {
                user,
                error_code,
                error_message,
                credential_infos,
            })
        })?;
        r.skip_tagged_fields(flex)?;
        Ok(DescribeUserScramCredentialsResponse {
            throttle_time_ms,
            error_code,
            error_message,
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
    use kafka_protocol::messages::describe_user_scram_credentials_request as kq;

    pub(crate) fn sample(_v: i16) -> kp::DescribeUserScramCredentialsRequest {
        let mut sent = kp::DescribeUserScramCredentialsRequest::default();
        let mut user = kq::UserName::default();
        user.name = s("alice");
        user.unknown_tagged_fields = unknown_tags();
        sent.users = Some(vec![user]);
        sent.unknown_tagged_fields = unknown_tags();
        sent
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        let mut all = kp::DescribeUserScramCredentialsRequest::default();
        all.users = None;
        vec![request_frame(API_KEY, 0, &sample(0)), request_frame(API_KEY, 0, &all)]
    }

    #[test]
    fn request_round_trips_named_and_all() {
        let (_, req) = decode_frame(&request_frame(API_KEY, 0, &sample(0)));
        let Request::DescribeUserScramCredentials(req) = req else {
            panic!("wrong api: {req:?}")
        };
        assert_eq!(req.users, Some(vec!["alice".to_string()]));
        let (_, all) = decode_frame(&sample_frames()[1]);
        let Request::DescribeUserScramCredentials(all) = all else {
            panic!("wrong api")
        };
        assert_eq!(all.users, None, "null means every user");
    }

    pub(crate) fn client_request(_v: i16) -> DescribeUserScramCredentialsRequest {
        DescribeUserScramCredentialsRequest {
            users: Some(vec!["alice".into(), "bob".into()]),
        }
    }

    pub(crate) fn client_response(_v: i16) -> DescribeUserScramCredentialsResponse {
        DescribeUserScramCredentialsResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            results: vec![
                UserScramCredentials {
                    user: "alice".into(),
                    error_code: 0,
                    error_message: None,
                    credential_infos: vec![CredentialInfo {
                        mechanism: 1,
                        iterations: 8192,
                    }],
                },
                UserScramCredentials {
                    user: "bob".into(),
                    error_code: 91,
                    error_message: Some("no such user".into()),
                    credential_infos: vec![],
                },
            ],
        }
    }

    #[test]
    fn client_codec_round_trips() {
        let req = client_request(0);
        let _: kp::DescribeUserScramCredentialsRequest =
            client_round_trip(0, &req, req.encode(0), DescribeUserScramCredentialsRequest::decode);
        let resp = client_response(0);
        let theirs: kp::DescribeUserScramCredentialsResponse =
            client_round_trip(0, &resp, resp.encode(0), DescribeUserScramCredentialsResponse::decode);
        assert_eq!(theirs.results[0].credential_infos[0].iterations, 8192);
        assert_eq!(theirs.results[1].error_code, 91);
    }
}
