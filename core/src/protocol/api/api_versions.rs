//! ApiVersions (key 18), v0–v4: what the broker speaks. Flexible from v3. v4 has v3's fields
//! (it only lets a broker advertise a feature minimum of 0), so it costs nothing to accept.
//!
//! KIP-511: a client may send a version newer than the broker knows. The broker cannot parse its
//! body, so it answers with a v0-format response carrying UNSUPPORTED_VERSION and the full
//! supported list ([`ApiVersionsResponse::unsupported_version`]); the client then retries with a
//! version from that list. The response header is always v0 (see `header.rs`).

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::supported_versions;
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 18;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 4;
pub const FLEXIBLE_MIN: i16 = 3;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsRequest {
    /// v3+; empty before.
    pub client_software_name: String,
    /// v3+; empty before.
    pub client_software_version: String,
}

impl ApiVersionsRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let mut req = ApiVersionsRequest::default();
        if version >= 3 {
            req.client_software_name = r.string(flex, "client_software_name")?;
            req.client_software_version = r.string(flex, "client_software_version")?;
        }
        r.skip_tagged_fields(flex)?;
        Ok(req)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersion {
    pub api_key: i16,
    pub min_version: i16,
    pub max_version: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionsResponse {
    pub error_code: i16,
    pub api_keys: Vec<ApiVersion>,
    /// v1+.
    pub throttle_time_ms: i32,
}

impl ApiVersionsResponse {
    /// The answer to a supported ApiVersions request: everything Gregor decodes and encodes.
    pub fn supported() -> Self {
        ApiVersionsResponse {
            error_code: crate::ErrorCode::None.code(),
            api_keys: supported_versions()
                .iter()
                .map(|s| ApiVersion {
                    api_key: s.api_key,
                    min_version: s.version_min,
                    max_version: s.version_max,
                })
                .collect(),
            throttle_time_ms: 0,
        }
    }

    /// KIP-511's answer to a version Gregor does not know: encode it with version 0.
    pub fn unsupported_version() -> Self {
        ApiVersionsResponse {
            error_code: crate::ErrorCode::UnsupportedVersion.code(),
            ..ApiVersionsResponse::supported()
        }
    }

    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        w.i16(self.error_code);
        w.array(flex, &self.api_keys, |w, k| {
            w.i16(k.api_key);
            w.i16(k.min_version);
            w.i16(k.max_version);
            w.no_tagged_fields(flex);
        });
        if version >= 1 {
            w.i32(self.throttle_time_ms);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl ApiVersionsRequest {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 3 {
            w.string(flex, &self.client_software_name);
            w.string(flex, &self.client_software_version);
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl ApiVersionsResponse {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let error_code = r.i16()?;
        let api_keys = r.array(flex, 6 + min_bytes::tags(flex), |r| {
            let api_key = r.i16()?;
            let min_version = r.i16()?;
            let max_version = r.i16()?;
            r.skip_tagged_fields(flex)?;
            Ok(ApiVersion {
                api_key,
                min_version,
                max_version,
            })
        })?;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        // v3+'s tagged features (KIP-584) mean nothing to Gregor's clients: skipped as unknown.
        r.skip_tagged_fields(flex)?;
        Ok(ApiVersionsResponse {
            error_code,
            api_keys,
            throttle_time_ms,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::{decode_frame, request_frame, response_as};
    use crate::protocol::{decode_request, DecodeError, Limits, Request};
    use kafka_protocol::messages as kp;

    /// A populated request as a Kafka client encodes it at version `v`.
    pub(crate) fn sample(_v: i16) -> kp::ApiVersionsRequest {
        kp::ApiVersionsRequest::default()
            .with_client_software_name("gregor-test".into())
            .with_client_software_version("1.2".into())
    }

    pub(crate) fn sample_frames() -> Vec<Vec<u8>> {
        (VERSION_MIN..=VERSION_MAX)
            .map(|v| request_frame(API_KEY, v, &sample(v)))
            .collect()
    }

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let sent = sample(v);
            let (h, req) = decode_frame(&request_frame(API_KEY, v, &sent));
            assert_eq!((h.api_key, h.api_version), (API_KEY, v));
            let Request::ApiVersions(req) = req else {
                panic!("wrong api: {req:?}")
            };
            if v >= 3 {
                assert_eq!(req.client_software_name, "gregor-test");
                assert_eq!(req.client_software_version, "1.2");
            } else {
                assert_eq!(req, ApiVersionsRequest::default());
            }
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        for v in VERSION_MIN..=VERSION_MAX {
            let ours = ApiVersionsResponse {
                throttle_time_ms: 7,
                ..ApiVersionsResponse::supported()
            };
            let theirs: kp::ApiVersionsResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.error_code, 0);
            assert_eq!(theirs.api_keys.len(), ours.api_keys.len());
            for (a, b) in theirs.api_keys.iter().zip(&ours.api_keys) {
                assert_eq!(
                    (a.api_key, a.min_version, a.max_version),
                    (b.api_key, b.min_version, b.max_version)
                );
            }
            assert_eq!(theirs.throttle_time_ms, if v >= 1 { 7 } else { 0 });
        }
    }

    #[test]
    fn unknown_version_gets_a_v0_unsupported_version_answer() {
        // ApiVersions v9 with a body we cannot know (flexible header, tagged fields, garbage).
        let mut frame = vec![0, 18, 0, 9, 0, 0, 0, 42, 0, 3, b'c', b'l', b'i', 0];
        frame.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let err = decode_request(&frame, Limits::default()).expect_err("v9 is unknown");
        let DecodeError::UnsupportedVersion { header } = err else {
            panic!("{err:?}")
        };
        assert_eq!((header.api_key, header.api_version, header.correlation_id), (18, 9, 42));
        let body = ApiVersionsResponse::unsupported_version().encode(0);
        let theirs: kp::ApiVersionsResponse = response_as(body, 0);
        assert_eq!(theirs.error_code, 35);
        assert!(theirs
            .api_keys
            .iter()
            .any(|k| k.api_key == API_KEY && k.max_version == VERSION_MAX));
    }

    pub(crate) fn client_request(v: i16) -> ApiVersionsRequest {
        if v >= 3 {
            ApiVersionsRequest {
                client_software_name: "gregor".into(),
                client_software_version: "0.1".into(),
            }
        } else {
            ApiVersionsRequest::default()
        }
    }

    pub(crate) fn client_response(v: i16) -> ApiVersionsResponse {
        ApiVersionsResponse {
            throttle_time_ms: if v >= 1 { 7 } else { 0 },
            ..ApiVersionsResponse::supported()
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        use crate::protocol::testing::client_round_trip;
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::ApiVersionsRequest = client_round_trip(v, &req, req.encode(v), ApiVersionsRequest::decode);
            assert_eq!(&*theirs.client_software_name, req.client_software_name);
            let resp = client_response(v);
            let theirs: kp::ApiVersionsResponse =
                client_round_trip(v, &resp, resp.encode(v), ApiVersionsResponse::decode);
            assert_eq!(theirs.throttle_time_ms, resp.throttle_time_ms);
        }
    }

    /// A real broker's v3+ answer carries KIP-584 features as tagged fields, and may carry tags
    /// no schema defines yet: our client skips them and reads the rest.
    #[test]
    fn client_reads_a_reference_answer_with_features_and_unknown_tags() {
        use crate::protocol::testing::{ours, reference_body, s, unknown_tags};
        use kp::api_versions_response as kav;
        for v in FLEXIBLE_MIN..=VERSION_MAX {
            let mut theirs = kp::ApiVersionsResponse::default();
            let mut key = kav::ApiVersion::default()
                .with_api_key(3)
                .with_min_version(0)
                .with_max_version(12);
            key.unknown_tagged_fields = unknown_tags();
            theirs.api_keys = vec![key];
            theirs.throttle_time_ms = 2;
            theirs.supported_features = vec![kav::SupportedFeatureKey::default()
                .with_name(s("metadata.version"))
                .with_min_version(1)
                .with_max_version(20)];
            theirs.finalized_features_epoch = 9;
            theirs.finalized_features = vec![kav::FinalizedFeatureKey::default()
                .with_name(s("metadata.version"))
                .with_max_version_level(20)
                .with_min_version_level(20)];
            theirs.zk_migration_ready = true;
            theirs.unknown_tagged_fields = unknown_tags();
            let got = ours(v, &reference_body(&theirs, v), ApiVersionsResponse::decode);
            let want = ApiVersionsResponse {
                error_code: 0,
                api_keys: vec![ApiVersion {
                    api_key: 3,
                    min_version: 0,
                    max_version: 12,
                }],
                throttle_time_ms: 2,
            };
            assert_eq!(got, want, "v{v}");
        }
    }
}
