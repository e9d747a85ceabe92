//! The client side of the Kafka wire codec: requests out, responses in. Gregor's own clients
//! (the simulator's producers and consumers, the follower's replica fetcher, the `gregor` CLI
//! and `gregor perf`) frame requests here and read the broker's answers.
//!
//! Contract: a response is as untrusted as a request (a client may talk to any server, and the
//! simulator corrupts frames), so [`decode_response`] keeps [`decode_request`]'s promises: it
//! never panics, allocates only in proportion to the bytes it was given, refuses trailing
//! bytes, and reports every failure as a [`DecodeError`]. [`Limits::request_bytes_max`] caps the
//! response frame here: set it from what the client asked for (fetch `max_bytes` plus slack).
//! Encoding our own requests trusts them: a value a version cannot carry (two FindCoordinator
//! keys at v3) is a programmer error and asserts, as on the broker side.
//!
//! Use: pick a version from the broker's ApiVersions answer, `encode_request(&header,
//! &request.encode(version))` (or [`request_frame`]), remember `(api_key, api_version)` under the
//! correlation id, and hand the reply frame to [`decode_response`] with them.
//!
//! [`decode_request`]: super::decode_request

use std::sync::Arc;

use bytes::Bytes;

use super::api::api_versions;
use super::header::{request_header_version, RequestHeader};
use super::reader::{DecodeError, Limits, Reader};
use super::writer::Writer;
use super::{api_support, check_len, Request, Response};

/// Frames a request: header v0, v1 or v2 as the API version requires (see `header.rs`), then
/// `body` (from a request's `encode`). The transport adds the 4-byte length prefix.
pub fn encode_request(header: &RequestHeader, body: &[u8]) -> Bytes {
    encode_request_with(header, body.len(), |w| w.raw(body))
}

/// As [`encode_request`], with the body written by `write_body` straight after the header into
/// one buffer of room for `body_bytes`: a Produce request's batches are not encoded into a
/// buffer of their own and then copied behind the header.
pub fn encode_request_with(header: &RequestHeader, body_bytes: usize, write_body: impl FnOnce(&mut Writer)) -> Bytes {
    let flexible_min = api_support(header.api_key).map(|s| s.flexible_min);
    let header_version = request_header_version(header.api_key, header.api_version, flexible_min);
    // The header's fixed fields, the client id and its length, tagged fields: one allocation.
    let header_bytes = 16 + header.client_id.as_deref().map_or(0, str::len);
    let mut w = Writer::with_capacity(header_bytes + body_bytes);
    w.i16(header.api_key);
    w.i16(header.api_version);
    w.i32(header.correlation_id);
    if header_version >= 1 {
        // Non-compact even in header v2: Kafka kept it readable by brokers of any age.
        w.nullable_string(false, header.client_id.as_deref());
    }
    w.no_tagged_fields(header_version >= 2);
    write_body(&mut w);
    w.finish()
}

/// The whole request frame (header and body, no length prefix). Sending one API's body under
/// another's header is a programmer error.
pub fn request_frame(header: &RequestHeader, request: &Request) -> Bytes {
    assert_eq!(header.api_key, request.api_key(), "request body for another API");
    match request {
        // The one large body (record batches): encoded in place behind the header.
        Request::Produce(p) => encode_request_with(header, p.size_hint(), |w| p.write(header.api_version, w)),
        // The most frequent one (followers, consumers): also written in place.
        Request::Fetch(f) => encode_request_with(header, f.size_hint(), |w| f.write(header.api_version, w)),
        _ => encode_request(header, &request.encode(header.api_version)),
    }
}

/// Decodes one response frame (without its length prefix) to the request the client sent as
/// `api_key` at `api_version`, giving the correlation id and the body. Record sets are copied
/// out of `frame`; [`decode_response_bytes`] shares its allocation instead.
pub fn decode_response(
    api_key: i16,
    api_version: i16,
    frame: &[u8],
    limits: Limits,
) -> Result<(i32, Response), DecodeError> {
    check_len(frame.len(), limits)?;
    decode_with(api_key, api_version, &mut Reader::new(frame, limits))
}

/// As [`decode_response`], but fetched record sets are slices of `frame` (zero copy).
pub fn decode_response_bytes(
    api_key: i16,
    api_version: i16,
    frame: &Bytes,
    limits: Limits,
) -> Result<(i32, Response), DecodeError> {
    decode_response_bytes_on(api_key, api_version, frame, limits, &mut None)
}

/// As [`decode_response_bytes`], for a connection whose last answer named the topic `topic`:
/// an answer naming it again shares it (see [`Reader::topic_name`]), and `topic` becomes the
/// one this answer named last.
pub fn decode_response_bytes_on(
    api_key: i16,
    api_version: i16,
    frame: &Bytes,
    limits: Limits,
    topic: &mut Option<Arc<str>>,
) -> Result<(i32, Response), DecodeError> {
    check_len(frame.len(), limits)?;
    let mut r = Reader::from_bytes(frame, limits).with_topic(topic.take());
    let decoded = decode_with(api_key, api_version, &mut r);
    *topic = r.take_topic();
    decoded
}

fn decode_with(api_key: i16, api_version: i16, r: &mut Reader<'_>) -> Result<(i32, Response), DecodeError> {
    let correlation_id = r.i32()?;
    // Asking about an API or version Gregor does not speak is the caller's mistake, but the
    // answer is still bytes off the wire: an error, not a panic.
    let header = || RequestHeader {
        api_key,
        api_version,
        correlation_id,
        client_id: None,
    };
    let Some(support) = api_support(api_key) else {
        return Err(DecodeError::UnknownApiKey {
            api_key,
            header: header(),
        });
    };
    if !support.supports(api_version) {
        return Err(DecodeError::UnsupportedVersion { header: header() });
    }
    // Response header v1 (tagged fields) from the first flexible version, except ApiVersions,
    // whose answers always use v0 so a client can read them before it knows the broker.
    let always_v0 = api_key == api_versions::API_KEY;
    r.skip_tagged_fields(!always_v0 && support.is_flexible(api_version))?;
    let body = r.clone();
    let response = Response::decode(api_key, api_version, r).and_then(|resp| {
        r.finish()?;
        Ok(resp)
    });
    match response {
        Ok(response) => Ok((correlation_id, response)),
        Err(err) if always_v0 && api_version > 0 => {
            // KIP-511: a broker that does not know our ApiVersions version answers in v0 with
            // UNSUPPORTED_VERSION (as Kafka's own client retries the parse). Anything else that
            // fails at our version is the original error.
            let mut r = body;
            match api_versions::ApiVersionsResponse::decode(0, &mut r) {
                Ok(v0) if v0.error_code == crate::ErrorCode::UnsupportedVersion.code() && r.finish().is_ok() => {
                    Ok((correlation_id, Response::ApiVersions(v0)))
                }
                _ => Err(err),
            }
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::RequestHeader as KpHeader;
    use kafka_protocol::protocol::Decodable;

    use super::*;
    use crate::protocol::api::*;
    use crate::protocol::{decode_request, reply, reply_api_versions_unsupported, supported_versions, Limits};

    /// One (request, response) pair per API and supported version, from each API's tests.
    pub(crate) fn samples() -> Vec<(i16, Request, Response)> {
        macro_rules! each {
            ($($variant:ident($m:ident)),* $(,)?) => {{
                let mut out = Vec::new();
                $(
                    for v in $m::VERSION_MIN..=$m::VERSION_MAX {
                        out.push((
                            v,
                            Request::$variant($m::tests::client_request(v)),
                            Response::$variant($m::tests::client_response(v)),
                        ));
                    }
                )*
                out
            }};
        }
        each!(
            ApiVersions(api_versions),
            Metadata(metadata),
            Produce(produce),
            Fetch(fetch),
            ListOffsets(list_offsets),
            CreateTopics(create_topics),
            InitProducerId(init_producer_id),
            OffsetForLeaderEpoch(offset_for_leader_epoch),
            FindCoordinator(find_coordinator),
            JoinGroup(join_group),
            SyncGroup(sync_group),
            Heartbeat(heartbeat),
            LeaveGroup(leave_group),
            DescribeGroups(describe_groups),
            ListGroups(list_groups),
            OffsetCommit(offset_commit),
            OffsetFetch(offset_fetch),
            DeleteTopics(delete_topics),
            DescribeConfigs(describe_configs),
            SaslHandshake(sasl_handshake),
            SaslAuthenticate(sasl_authenticate),
            DescribeAcls(describe_acls),
            CreateAcls(create_acls),
            DeleteAcls(delete_acls),
            ElectLeaders(elect_leaders),
            AlterPartitionReassignments(alter_partition_reassignments),
            ListPartitionReassignments(list_partition_reassignments),
            DescribeUserScramCredentials(describe_user_scram_credentials),
            AlterUserScramCredentials(alter_user_scram_credentials),
        )
    }

    fn header(api_key: i16, api_version: i16, client_id: Option<&str>) -> RequestHeader {
        RequestHeader {
            api_key,
            api_version,
            correlation_id: 0x0a0b_0c0d,
            client_id: client_id.map(std::sync::Arc::from),
        }
    }

    /// Every response frame a broker could send for the samples: the fuzz corpus.
    pub(crate) fn response_frames() -> Vec<(i16, i16, Vec<u8>)> {
        samples()
            .into_iter()
            .map(|(v, req, resp)| {
                let h = header(req.api_key(), v, Some("c"));
                (h.api_key, v, reply(&h, &resp).to_vec())
            })
            .collect()
    }

    #[test]
    fn samples_cover_every_supported_version() {
        let samples = samples();
        for s in supported_versions() {
            for v in s.version_min..=s.version_max {
                let found = samples
                    .iter()
                    .any(|(sv, req, _)| req.api_key() == s.api_key && *sv == v);
                assert!(found, "no client sample for {} v{v}", s.name);
            }
        }
    }

    /// Our client frames a request; our broker decodes the same header and body. Our broker
    /// frames the response; our client decodes the same correlation id and body.
    #[test]
    fn frames_round_trip_through_both_sides() {
        for (v, req, resp) in samples() {
            for client_id in [Some("gregor-cli"), None] {
                let h = header(req.api_key(), v, client_id);
                let frame = request_frame(&h, &req);
                let (got_header, got) = decode_request(&frame, Limits::default()).expect("our broker reads it");
                assert_eq!(got, req, "key {} v{v}", h.api_key);
                assert_eq!(got_header, h, "key {} v{v}", h.api_key);
            }
            let h = header(req.api_key(), v, None);
            let frame = reply(&h, &resp);
            let (correlation_id, got) =
                decode_response(h.api_key, v, &frame, Limits::default()).expect("our client reads it");
            assert_eq!(
                (correlation_id, &got),
                (h.correlation_id, &resp),
                "key {} v{v}",
                h.api_key
            );
            let shared = decode_response_bytes(h.api_key, v, &frame, Limits::default()).expect("shared");
            assert_eq!(shared, (correlation_id, got));
        }
    }

    /// Our request header is the one kafka-protocol's broker side reads, in every version.
    #[test]
    fn request_header_agrees_with_the_reference() {
        for (v, req, _) in samples() {
            let h = header(req.api_key(), v, Some("gregor"));
            let hv = request_header_version(h.api_key, v, api_support(h.api_key).map(|s| s.flexible_min));
            let mut frame = encode_request(&h, b"");
            let theirs = KpHeader::decode(&mut frame, hv).expect("reference reads our header");
            assert!(frame.is_empty(), "key {} v{v}: header bytes left", h.api_key);
            assert_eq!(
                (
                    theirs.request_api_key,
                    theirs.request_api_version,
                    theirs.correlation_id
                ),
                (h.api_key, v, h.correlation_id)
            );
            assert_eq!(theirs.client_id.as_deref(), Some("gregor"));
        }
        // Header v0 (ControlledShutdown v0): no client id at all.
        let frame = encode_request(&header(7, 0, Some("ignored")), b"");
        assert_eq!(&frame[..], &[0, 7, 0, 0, 0x0a, 0x0b, 0x0c, 0x0d]);
    }

    #[test]
    fn trailing_bytes_are_refused() {
        for (api_key, v, mut frame) in response_frames() {
            frame.push(0);
            let res = decode_response(api_key, v, &frame, Limits::default());
            assert!(
                matches!(res, Err(DecodeError::TrailingBytes { remaining: 1 })),
                "key {api_key} v{v}: {res:?}"
            );
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for (api_key, v, frame) in response_frames() {
            for len in 0..frame.len() {
                let res = decode_response(api_key, v, &frame[..len], Limits::default());
                assert!(res.is_err(), "key {api_key} v{v}: {len}-byte prefix decoded");
            }
        }
    }

    #[test]
    fn frames_over_the_limit_and_unknown_apis_are_errors() {
        let limits = Limits {
            request_bytes_max: 8,
            ..Limits::default()
        };
        let res = decode_response(3, 1, &[0u8; 9], limits);
        assert!(
            matches!(res, Err(DecodeError::FrameTooLarge { len: 9, max: 8 })),
            "{res:?}"
        );
        let res = decode_response(99, 0, &[0, 0, 0, 1], Limits::default());
        assert!(
            matches!(res, Err(DecodeError::UnknownApiKey { api_key: 99, .. })),
            "{res:?}"
        );
        let res = decode_response(3, 99, &[0, 0, 0, 1], Limits::default());
        assert!(
            matches!(res, Err(DecodeError::UnsupportedVersion { ref header }) if header.correlation_id == 1),
            "{res:?}"
        );
    }

    /// KIP-511: a broker that does not know our ApiVersions version answers in v0 with
    /// UNSUPPORTED_VERSION; the client reads that answer although it asked at v3.
    #[test]
    fn api_versions_unsupported_answer_is_read_as_v0() {
        let h = header(api_versions::API_KEY, 3, Some("c"));
        let frame = reply_api_versions_unsupported(&h);
        let (correlation_id, resp) = decode_response(h.api_key, 3, &frame, Limits::default()).expect("v0 fallback");
        assert_eq!(correlation_id, h.correlation_id);
        let Response::ApiVersions(resp) = resp else {
            panic!("{resp:?}")
        };
        assert_eq!(resp.error_code, crate::ErrorCode::UnsupportedVersion.code());
        assert_eq!(resp.api_keys.len(), supported_versions().len());
        // A v0 body with any other error code is not taken for an answer at v3.
        let mut frame = frame.to_vec();
        frame[4..6].copy_from_slice(&0i16.to_be_bytes());
        assert!(decode_response(h.api_key, 3, &frame, Limits::default()).is_err());
    }

    /// The Fetch records a consumer reads share the response frame's allocation.
    #[test]
    fn fetched_records_are_not_copied() {
        let v = fetch::VERSION_MAX;
        let h = header(fetch::API_KEY, v, None);
        let frame: Bytes = reply(&h, &Response::Fetch(fetch::tests::client_response(v)));
        let (_, resp) = decode_response_bytes(fetch::API_KEY, v, &frame, Limits::default()).expect("valid");
        let Response::Fetch(resp) = resp else {
            panic!("{resp:?}")
        };
        let records = resp.topics[0].partitions[0].records.as_ref().expect("sent");
        assert!(frame.as_ptr_range().contains(&records.as_ptr()));
    }
}
