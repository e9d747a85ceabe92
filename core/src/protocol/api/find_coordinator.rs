//! FindCoordinator (key 10), v0–v4: which broker coordinates a consumer group (key_type 0) or a
//! transactional id (key_type 1). Flexible from v3. From v4 (KIP-699) one request asks for many
//! keys and the response carries one `Coordinator` per key; before v4 there is one key and the
//! answer sits at the top level. [`FindCoordinatorResponse::encode`] maps between the two, so
//! callers always fill `coordinators`.

use bytes::Bytes;

use crate::protocol::reader::{min_bytes, Reader, Result};
use crate::protocol::writer::Writer;

pub const API_KEY: i16 = 10;
pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 4;
pub const FLEXIBLE_MIN: i16 = 3;

pub const KEY_TYPE_GROUP: i8 = 0;
pub const KEY_TYPE_TRANSACTION: i8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FindCoordinatorRequest {
    /// v1+; group (0) before.
    pub key_type: i8,
    /// v0–v3's single `key`, or v4's `coordinator_keys`.
    pub keys: Vec<String>,
}

impl FindCoordinatorRequest {
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let mut keys = Vec::new();
        if version <= 3 {
            keys.push(r.string(flex, "key")?);
        }
        let key_type = if version >= 1 { r.i8()? } else { KEY_TYPE_GROUP };
        if version >= 4 {
            keys = r.array(flex, min_bytes::string(flex), |r| r.string(flex, "coordinator_keys"))?;
        }
        r.skip_tagged_fields(flex)?;
        Ok(FindCoordinatorRequest { key_type, keys })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FindCoordinatorResponse {
    /// v1+.
    pub throttle_time_ms: i32,
    /// One per requested key. Before v4 exactly one, written as the top-level fields.
    pub coordinators: Vec<Coordinator>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Coordinator {
    pub key: String,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub error_code: i16,
    /// v1+.
    pub error_message: Option<String>,
}

impl FindCoordinatorResponse {
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version >= 1 {
            w.i32(self.throttle_time_ms);
        }
        if version <= 3 {
            assert_eq!(self.coordinators.len(), 1, "v0-v3 answer exactly one key");
            let c = &self.coordinators[0];
            w.i16(c.error_code);
            if version >= 1 {
                w.nullable_string(flex, c.error_message.as_deref());
            }
            w.i32(c.node_id);
            w.string(flex, &c.host);
            w.i32(c.port);
        } else {
            w.array(flex, &self.coordinators, |w, c| {
                w.string(flex, &c.key);
                w.i32(c.node_id);
                w.string(flex, &c.host);
                w.i32(c.port);
                w.i16(c.error_code);
                w.nullable_string(flex, c.error_message.as_deref());
                w.no_tagged_fields(flex);
            });
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

// Client side: the request we send and the response we read from an untrusted server, each the
// mirror image of the broker side above.

impl FindCoordinatorRequest {
    /// v0–v3 carry exactly one key: sending another count there is a programmer error.
    pub fn encode(&self, version: i16) -> Bytes {
        assert!((VERSION_MIN..=VERSION_MAX).contains(&version));
        let flex = version >= FLEXIBLE_MIN;
        let mut w = Writer::new();
        if version <= 3 {
            assert_eq!(self.keys.len(), 1, "v0-v3 ask for exactly one key");
            w.string(flex, &self.keys[0]);
        }
        if version >= 1 {
            w.i8(self.key_type);
        }
        if version >= 4 {
            w.array(flex, &self.keys, |w, k| w.string(flex, k));
        }
        w.no_tagged_fields(flex);
        w.finish()
    }
}

impl FindCoordinatorResponse {
    /// Before v4 the one answer becomes one `Coordinator` whose `key` is empty (the wire does
    /// not repeat it: it is the key the request asked for).
    pub fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let flex = version >= FLEXIBLE_MIN;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let coordinators = if version <= 3 {
            let error_code = r.i16()?;
            let error_message = if version >= 1 { r.nullable_string(flex)? } else { None };
            let node_id = r.i32()?;
            let host = r.string(flex, "host")?;
            let port = r.i32()?;
            vec![Coordinator {
                key: String::new(),
                node_id,
                host,
                port,
                error_code,
                error_message,
            }]
        } else {
            let string = min_bytes::string(flex);
            let coordinator_min = string + 4 + string + 4 + 2 + string + min_bytes::tags(flex);
            r.array(flex, coordinator_min, |r| {
                let key = r.string(flex, "coordinators.key")?;
                let node_id = r.i32()?;
                let host = r.string(flex, "coordinators.host")?;
                let port = r.i32()?;
                let error_code = r.i16()?;
                let error_message = r.nullable_string(flex)?;
                r.skip_tagged_fields(flex)?;
                Ok(Coordinator {
                    key,
                    node_id,
                    host,
                    port,
                    error_code,
                    error_message,
                })
            })?
        };
        r.skip_tagged_fields(flex)?;
        Ok(FindCoordinatorResponse {
            throttle_time_ms,
            coordinators,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::testing::*;
    use crate::protocol::Request;
    use kafka_protocol::messages as kp;

    pub(crate) fn sample(v: i16) -> kp::FindCoordinatorRequest {
        let mut sent = kp::FindCoordinatorRequest::default();
        if v <= 3 {
            sent.key = s("group-a");
        } else {
            sent.coordinator_keys = vec![s("group-a"), s("group-b")];
        }
        if v >= 1 {
            sent.key_type = KEY_TYPE_TRANSACTION;
        }
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

    #[test]
    fn request_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let (_, req) = decode_frame(&request_frame(API_KEY, v, &sample(v)));
            let Request::FindCoordinator(req) = req else {
                panic!("wrong api: {req:?}")
            };
            let keys: Vec<String> = if v <= 3 {
                vec!["group-a".into()]
            } else {
                vec!["group-a".into(), "group-b".into()]
            };
            assert_eq!(req.keys, keys, "v{v}");
            let key_type = if v >= 1 { KEY_TYPE_TRANSACTION } else { KEY_TYPE_GROUP };
            assert_eq!(req.key_type, key_type);
        }
    }

    #[test]
    fn response_decodes_with_the_reference_codec() {
        let coordinator = Coordinator {
            key: "group-a".into(),
            node_id: 2,
            host: "b2".into(),
            port: 9092,
            error_code: 0,
            error_message: Some("fine".into()),
        };
        let ours = FindCoordinatorResponse {
            throttle_time_ms: 4,
            coordinators: vec![coordinator],
        };
        for v in VERSION_MIN..=VERSION_MAX {
            let theirs: kp::FindCoordinatorResponse = response_as(ours.encode(v), v);
            assert_eq!(theirs.throttle_time_ms, if v >= 1 { 4 } else { 0 });
            let msg = if v >= 1 { Some("fine") } else { None };
            if v <= 3 {
                assert_eq!((theirs.node_id.0, &*theirs.host, theirs.port), (2, "b2", 9092));
                if v >= 1 {
                    assert_eq!(theirs.error_message.as_deref(), msg);
                }
            } else {
                let c = &theirs.coordinators[0];
                assert_eq!((&*c.key, c.node_id.0, &*c.host, c.port), ("group-a", 2, "b2", 9092));
                assert_eq!(c.error_message.as_deref(), msg);
            }
        }
    }

    pub(crate) fn client_request(v: i16) -> FindCoordinatorRequest {
        FindCoordinatorRequest {
            key_type: if v >= 1 { KEY_TYPE_TRANSACTION } else { KEY_TYPE_GROUP },
            keys: if v >= 4 {
                vec!["g1".into(), "g2".into()]
            } else {
                vec!["g1".into()]
            },
        }
    }

    pub(crate) fn client_response(v: i16) -> FindCoordinatorResponse {
        let one = |key: &str, node_id| Coordinator {
            key: if v >= 4 { key.into() } else { String::new() },
            node_id,
            host: format!("broker-{node_id}"),
            port: 9092,
            error_code: 0,
            error_message: if v >= 1 { Some("m".into()) } else { None },
        };
        FindCoordinatorResponse {
            throttle_time_ms: if v >= 1 { 4 } else { 0 },
            coordinators: if v >= 4 {
                vec![one("g1", 2), one("g2", 3)]
            } else {
                vec![one("g1", 2)]
            },
        }
    }

    #[test]
    fn client_codec_round_trips_every_version() {
        for v in VERSION_MIN..=VERSION_MAX {
            let req = client_request(v);
            let theirs: kp::FindCoordinatorRequest =
                client_round_trip(v, &req, req.encode(v), FindCoordinatorRequest::decode);
            assert_eq!(theirs.key_type, req.key_type);
            let resp = client_response(v);
            let theirs: kp::FindCoordinatorResponse =
                client_round_trip(v, &resp, resp.encode(v), FindCoordinatorResponse::decode);
            if v <= 3 {
                assert_eq!((theirs.node_id.0, &*theirs.host), (2, "broker-2"));
            }
        }
    }
}
