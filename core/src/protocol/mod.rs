//! The Kafka wire codec. Broker side (here): requests in, responses out. Client side
//! (`client.rs`, and each API's `Request::encode` / `Response::decode`): requests out,
//! responses in, with the same bounds, because a server's bytes are untrusted too.
//!
//! Owns: decoding request frames (untrusted bytes) into our own structs, and encoding our
//! response structs. A frame here is what follows the 4-byte length prefix; the transport owns
//! the prefix and must refuse lengths over [`Limits::request_bytes_max`] before reading them.
//!
//! Contract: [`decode_request`] never panics and allocates only in proportion to the bytes it was
//! given (see `reader.rs`), because the published `kafka-protocol` decoder pre-allocates from
//! wire counts and a 6-byte Metadata request makes it abort. Responses are encoded by our own
//! `Writer` rather than `kafka-protocol`: the decoders already spell out each version's fields,
//! encoding mirrors them line for line, and core then needs no conversion layer or extra
//! dependencies; `kafka-protocol` is only a test oracle.
//! [`supported_versions`] advertises exactly the versions both decoded and encoded here.
//!
//! Use: `decode_request` (or `decode_request_bytes` to keep record sets zero-copy) gives a
//! header and a [`Request`]; the broker answers with [`reply`]`(&header, &Response)`. An error
//! carries the header when one was read: `UnsupportedVersion` for ApiVersions is answered with
//! [`reply_api_versions_unsupported`] (KIP-511); other errors close the connection, as Kafka does.
//! Limits ([`Limits`]): frame bytes, elements per array and per request, tagged fields per
//! section, string bytes; each checked before anything is allocated for it.

pub mod api;
pub mod client;
pub mod header;
pub mod reader;
pub mod writer;

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod fuzz;

use std::sync::Arc;

use bytes::Bytes;

pub use client::{decode_response, decode_response_bytes, encode_request, request_frame};
pub use header::{encode_response_header, request_header_version, RequestHeader};
pub use reader::{
    DecodeError, Limits, Reader, ARRAY_LEN_MAX, REQUEST_BYTES_MAX, REQUEST_ELEMENTS_MAX, TAGGED_FIELDS_MAX,
};
pub use writer::Writer;

use api::*;

/// A Kafka UUID (topic ids): 16 raw bytes; all zeros is Kafka's "no id".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    pub const ZERO: Uuid = Uuid([0; 16]);
}

/// One API's versions as Gregor handles them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiSupport {
    pub api_key: i16,
    pub name: &'static str,
    pub version_min: i16,
    pub version_max: i16,
    /// First flexible version (compact encodings, tagged fields, request header v2).
    pub flexible_min: i16,
}

impl ApiSupport {
    pub fn supports(&self, version: i16) -> bool {
        (self.version_min..=self.version_max).contains(&version)
    }
    pub fn is_flexible(&self, version: i16) -> bool {
        version >= self.flexible_min
    }
}

macro_rules! support {
    ($name:literal, $m:ident) => {
        ApiSupport {
            api_key: $m::API_KEY,
            name: $name,
            version_min: $m::VERSION_MIN,
            version_max: $m::VERSION_MAX,
            flexible_min: $m::FLEXIBLE_MIN,
        }
    };
}

const SUPPORTED: &[ApiSupport] = &[
    support!("Produce", produce),
    support!("Fetch", fetch),
    support!("ListOffsets", list_offsets),
    support!("Metadata", metadata),
    support!("OffsetCommit", offset_commit),
    support!("OffsetFetch", offset_fetch),
    support!("FindCoordinator", find_coordinator),
    support!("JoinGroup", join_group),
    support!("Heartbeat", heartbeat),
    support!("LeaveGroup", leave_group),
    support!("SyncGroup", sync_group),
    support!("DescribeGroups", describe_groups),
    support!("ListGroups", list_groups),
    support!("SaslHandshake", sasl_handshake),
    support!("ApiVersions", api_versions),
    support!("CreateTopics", create_topics),
    support!("DeleteTopics", delete_topics),
    support!("InitProducerId", init_producer_id),
    support!("OffsetForLeaderEpoch", offset_for_leader_epoch),
    support!("DescribeAcls", describe_acls),
    support!("CreateAcls", create_acls),
    support!("DeleteAcls", delete_acls),
    support!("DescribeConfigs", describe_configs),
    support!("SaslAuthenticate", sasl_authenticate),
    support!("ElectLeaders", elect_leaders),
    support!("AlterPartitionReassignments", alter_partition_reassignments),
    support!("ListPartitionReassignments", list_partition_reassignments),
    support!("DescribeUserScramCredentials", describe_user_scram_credentials),
    support!("AlterUserScramCredentials", alter_user_scram_credentials),
];

/// Every API Gregor decodes and encodes, in ascending key order: what ApiVersions advertises.
pub fn supported_versions() -> &'static [ApiSupport] {
    SUPPORTED
}

/// The support entry for `api_key`, if Gregor speaks that API at all.
pub fn api_support(api_key: i16) -> Option<&'static ApiSupport> {
    SUPPORTED.iter().find(|s| s.api_key == api_key)
}

/// A decoded request body.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Produce(produce::ProduceRequest),
    Fetch(fetch::FetchRequest),
    ListOffsets(list_offsets::ListOffsetsRequest),
    Metadata(metadata::MetadataRequest),
    ApiVersions(api_versions::ApiVersionsRequest),
    CreateTopics(create_topics::CreateTopicsRequest),
    OffsetCommit(offset_commit::OffsetCommitRequest),
    OffsetFetch(offset_fetch::OffsetFetchRequest),
    DeleteTopics(delete_topics::DeleteTopicsRequest),
    DescribeConfigs(describe_configs::DescribeConfigsRequest),
    FindCoordinator(find_coordinator::FindCoordinatorRequest),
    JoinGroup(join_group::JoinGroupRequest),
    Heartbeat(heartbeat::HeartbeatRequest),
    LeaveGroup(leave_group::LeaveGroupRequest),
    SyncGroup(sync_group::SyncGroupRequest),
    DescribeGroups(describe_groups::DescribeGroupsRequest),
    ListGroups(list_groups::ListGroupsRequest),
    InitProducerId(init_producer_id::InitProducerIdRequest),
    OffsetForLeaderEpoch(offset_for_leader_epoch::OffsetForLeaderEpochRequest),
    SaslHandshake(sasl_handshake::SaslHandshakeRequest),
    SaslAuthenticate(sasl_authenticate::SaslAuthenticateRequest),
    DescribeAcls(describe_acls::DescribeAclsRequest),
    CreateAcls(create_acls::CreateAclsRequest),
    DeleteAcls(delete_acls::DeleteAclsRequest),
    ElectLeaders(elect_leaders::ElectLeadersRequest),
    AlterPartitionReassignments(alter_partition_reassignments::AlterPartitionReassignmentsRequest),
    ListPartitionReassignments(list_partition_reassignments::ListPartitionReassignmentsRequest),
    DescribeUserScramCredentials(describe_user_scram_credentials::DescribeUserScramCredentialsRequest),
    AlterUserScramCredentials(alter_user_scram_credentials::AlterUserScramCredentialsRequest),
}

macro_rules! request_dispatch {
    ($($variant:ident($m:ident)),* $(,)?) => {
        impl Request {
            pub fn api_key(&self) -> i16 {
                match self {
                    $(Request::$variant(_) => $m::API_KEY,)*
                }
            }

            /// The body at `version` (client side), which must be one Gregor supports.
            pub fn encode(&self, version: i16) -> Bytes {
                match self {
                    $(Request::$variant(r) => r.encode(version),)*
                }
            }
        }
    };
}

request_dispatch!(
    Produce(produce),
    Fetch(fetch),
    ListOffsets(list_offsets),
    Metadata(metadata),
    ApiVersions(api_versions),
    CreateTopics(create_topics),
    OffsetCommit(offset_commit),
    OffsetFetch(offset_fetch),
    DeleteTopics(delete_topics),
    DescribeConfigs(describe_configs),
    FindCoordinator(find_coordinator),
    JoinGroup(join_group),
    Heartbeat(heartbeat),
    LeaveGroup(leave_group),
    SyncGroup(sync_group),
    DescribeGroups(describe_groups),
    ListGroups(list_groups),
    InitProducerId(init_producer_id),
    OffsetForLeaderEpoch(offset_for_leader_epoch),
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
);

/// `name` as the `Arc<str>` a request or answer carries: `last`'s when they are equal (no
/// allocation), else a new one, which `last` then keeps. A client names the same topic in
/// request after request.
pub fn shared_name(last: &mut Option<Arc<str>>, name: &str) -> Arc<str> {
    match last {
        Some(known) if crate::short_eq::same(known, name) => known.clone(),
        _ => last.insert(Arc::from(name)).clone(),
    }
}

/// Decodes one request frame (without its length prefix). Record sets are copied out of
/// `frame`; use [`decode_request_bytes`] to share the frame's allocation instead.
pub fn decode_request(frame: &[u8], limits: Limits) -> Result<(RequestHeader, Request), DecodeError> {
    check_len(frame.len(), limits)?;
    decode_with(&mut Reader::new(frame, limits), &mut None)
}

/// As [`decode_request`], but produce record sets are slices of `frame` (zero copy).
pub fn decode_request_bytes(frame: &Bytes, limits: Limits) -> Result<(RequestHeader, Request), DecodeError> {
    decode_request_bytes_on(frame, limits, &mut None, &mut None)
}

/// As [`decode_request_bytes`], for a connection whose last client id is `client_id` and whose
/// last request named the topic `topic`: a request with the same ones shares them (no copy, no
/// UTF-8 check), and they become this request's.
pub fn decode_request_bytes_on(
    frame: &Bytes,
    limits: Limits,
    client_id: &mut Option<Arc<str>>,
    topic: &mut Option<Arc<str>>,
) -> Result<(RequestHeader, Request), DecodeError> {
    check_len(frame.len(), limits)?;
    let mut r = Reader::from_bytes(frame, limits).with_topic(topic.take());
    let decoded = decode_with(&mut r, client_id);
    *topic = r.take_topic();
    decoded
}

fn check_len(len: usize, limits: Limits) -> Result<(), DecodeError> {
    if len > limits.request_bytes_max {
        return Err(DecodeError::FrameTooLarge {
            len,
            max: limits.request_bytes_max,
        });
    }
    Ok(())
}

fn decode_with(r: &mut Reader<'_>, client_id: &mut Option<Arc<str>>) -> Result<(RequestHeader, Request), DecodeError> {
    let flexible_min = |key| api_support(key).map(|s| s.flexible_min);
    let (header, header_version) = RequestHeader::decode_fixed(r, flexible_min, client_id)?;
    let Some(support) = api_support(header.api_key) else {
        return Err(DecodeError::UnknownApiKey {
            api_key: header.api_key,
            header,
        });
    };
    let v = header.api_version;
    if !support.supports(v) {
        // For ApiVersions the caller answers with `ApiVersionsResponse::unsupported_version`
        // (KIP-511); the body of an unknown version is not read.
        return Err(DecodeError::UnsupportedVersion { header });
    }
    r.skip_tagged_fields(header_version >= 2)?;
    let request = match header.api_key {
        api_versions::API_KEY => Request::ApiVersions(api_versions::ApiVersionsRequest::decode(v, r)?),
        metadata::API_KEY => Request::Metadata(metadata::MetadataRequest::decode(v, r)?),
        produce::API_KEY => Request::Produce(produce::ProduceRequest::decode(v, r)?),
        fetch::API_KEY => Request::Fetch(fetch::FetchRequest::decode(v, r)?),
        list_offsets::API_KEY => Request::ListOffsets(list_offsets::ListOffsetsRequest::decode(v, r)?),
        create_topics::API_KEY => Request::CreateTopics(create_topics::CreateTopicsRequest::decode(v, r)?),
        find_coordinator::API_KEY => Request::FindCoordinator(find_coordinator::FindCoordinatorRequest::decode(v, r)?),
        join_group::API_KEY => Request::JoinGroup(join_group::JoinGroupRequest::decode(v, r)?),
        heartbeat::API_KEY => Request::Heartbeat(heartbeat::HeartbeatRequest::decode(v, r)?),
        leave_group::API_KEY => Request::LeaveGroup(leave_group::LeaveGroupRequest::decode(v, r)?),
        sync_group::API_KEY => Request::SyncGroup(sync_group::SyncGroupRequest::decode(v, r)?),
        describe_groups::API_KEY => Request::DescribeGroups(describe_groups::DescribeGroupsRequest::decode(v, r)?),
        list_groups::API_KEY => Request::ListGroups(list_groups::ListGroupsRequest::decode(v, r)?),
        init_producer_id::API_KEY => Request::InitProducerId(init_producer_id::InitProducerIdRequest::decode(v, r)?),
        offset_for_leader_epoch::API_KEY => {
            Request::OffsetForLeaderEpoch(offset_for_leader_epoch::OffsetForLeaderEpochRequest::decode(v, r)?)
        }
        offset_commit::API_KEY => Request::OffsetCommit(offset_commit::OffsetCommitRequest::decode(v, r)?),
        offset_fetch::API_KEY => Request::OffsetFetch(offset_fetch::OffsetFetchRequest::decode(v, r)?),
        delete_topics::API_KEY => Request::DeleteTopics(delete_topics::DeleteTopicsRequest::decode(v, r)?),
        describe_configs::API_KEY => Request::DescribeConfigs(describe_configs::DescribeConfigsRequest::decode(v, r)?),
        sasl_handshake::API_KEY => Request::SaslHandshake(sasl_handshake::SaslHandshakeRequest::decode(v, r)?),
        sasl_authenticate::API_KEY => {
            Request::SaslAuthenticate(sasl_authenticate::SaslAuthenticateRequest::decode(v, r)?)
        }
        describe_acls::API_KEY => Request::DescribeAcls(describe_acls::DescribeAclsRequest::decode(v, r)?),
        create_acls::API_KEY => Request::CreateAcls(create_acls::CreateAclsRequest::decode(v, r)?),
        delete_acls::API_KEY => Request::DeleteAcls(delete_acls::DeleteAclsRequest::decode(v, r)?),
        elect_leaders::API_KEY => Request::ElectLeaders(elect_leaders::ElectLeadersRequest::decode(v, r)?),
        alter_partition_reassignments::API_KEY => Request::AlterPartitionReassignments(
            alter_partition_reassignments::AlterPartitionReassignmentsRequest::decode(v, r)?,
        ),
        list_partition_reassignments::API_KEY => Request::ListPartitionReassignments(
            list_partition_reassignments::ListPartitionReassignmentsRequest::decode(v, r)?,
        ),
        describe_user_scram_credentials::API_KEY => Request::DescribeUserScramCredentials(
            describe_user_scram_credentials::DescribeUserScramCredentialsRequest::decode(v, r)?,
        ),
        alter_user_scram_credentials::API_KEY => Request::AlterUserScramCredentials(
            alter_user_scram_credentials::AlterUserScramCredentialsRequest::decode(v, r)?,
        ),
        // Unreachable while SUPPORTED and this match agree (the fuzz corpus test decodes every
        // advertised version); answered as unknown rather than panicking if they ever drift.
        _ => {
            return Err(DecodeError::UnknownApiKey {
                api_key: header.api_key,
                header,
            })
        }
    };
    // Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka 2.x sends a
    // Metadata v12 "all topics" request with 3 stray bytes after the null topic array (left from
    // the space it reserves for the array count), and refusing it closed the connection behind
    // confluent-kafka's `list_topics()`. Every field was still read with its bounds checked.
    Ok((header, request))
}

/// Frames a response: header for the request's API and version, then `body` (from a response's
/// `encode`). The transport adds the 4-byte length prefix.
pub fn encode_response(request: &RequestHeader, body: &[u8]) -> Bytes {
    encode_response_with(request, body.len(), |w| w.raw(body))
}

/// As [`encode_response`], with the body written by `write_body` straight after the header
/// into one buffer of room for `body_bytes`: a large body (a Fetch answer's records) is not
/// encoded into a buffer of its own and then copied behind the header.
pub fn encode_response_with(request: &RequestHeader, body_bytes: usize, write_body: impl FnOnce(&mut Writer)) -> Bytes {
    let flexible_min = api_support(request.api_key).map_or(i16::MAX, |s| s.flexible_min);
    // Correlation id and tagged fields: the header is at most 5 bytes.
    let mut w = Writer::with_capacity(8 + body_bytes);
    encode_response_header(
        &mut w,
        request.api_key,
        request.api_version,
        flexible_min,
        request.correlation_id,
    );
    write_body(&mut w);
    w.finish()
}

macro_rules! responses {
    ($($variant:ident($m:ident::$ty:ident),)*) => {
        /// A response body, one variant per API, encoded at the version of its request.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Response {
            $($variant($m::$ty),)*
        }

        impl Response {
            pub fn api_key(&self) -> i16 {
                match self {
                    $(Response::$variant(_) => $m::API_KEY,)*
                }
            }

            /// The body at `version`, which must be one Gregor supports for this API.
            pub fn encode(&self, version: i16) -> Bytes {
                match self {
                    $(Response::$variant(r) => r.encode(version),)*
                }
            }

            /// Client side: the body of `api_key`'s response at `version`, from untrusted bytes.
            /// `decode_response` checks the version first; an unknown key is an error here too.
            pub fn decode(api_key: i16, version: i16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                match api_key {
                    $($m::API_KEY => Ok(Response::$variant($m::$ty::decode(version, r)?)),)*
                    _ => Err(DecodeError::UnknownApiKey {
                        api_key,
                        header: RequestHeader {
                            api_key,
                            api_version: version,
                            correlation_id: 0,
                            client_id: None,
                        },
                    }),
                }
            }
        }
    };
}

responses! {
    Produce(produce::ProduceResponse),
    Fetch(fetch::FetchResponse),
    ListOffsets(list_offsets::ListOffsetsResponse),
    Metadata(metadata::MetadataResponse),
    OffsetCommit(offset_commit::OffsetCommitResponse),
    OffsetFetch(offset_fetch::OffsetFetchResponse),
    FindCoordinator(find_coordinator::FindCoordinatorResponse),
    JoinGroup(join_group::JoinGroupResponse),
    Heartbeat(heartbeat::HeartbeatResponse),
    LeaveGroup(leave_group::LeaveGroupResponse),
    SyncGroup(sync_group::SyncGroupResponse),
    DescribeGroups(describe_groups::DescribeGroupsResponse),
    ListGroups(list_groups::ListGroupsResponse),
    ApiVersions(api_versions::ApiVersionsResponse),
    CreateTopics(create_topics::CreateTopicsResponse),
    DeleteTopics(delete_topics::DeleteTopicsResponse),
    InitProducerId(init_producer_id::InitProducerIdResponse),
    OffsetForLeaderEpoch(offset_for_leader_epoch::OffsetForLeaderEpochResponse),
    DescribeConfigs(describe_configs::DescribeConfigsResponse),
    SaslHandshake(sasl_handshake::SaslHandshakeResponse),
    SaslAuthenticate(sasl_authenticate::SaslAuthenticateResponse),
    DescribeAcls(describe_acls::DescribeAclsResponse),
    CreateAcls(create_acls::CreateAclsResponse),
    DeleteAcls(delete_acls::DeleteAclsResponse),
    ElectLeaders(elect_leaders::ElectLeadersResponse),
    AlterPartitionReassignments(alter_partition_reassignments::AlterPartitionReassignmentsResponse),
    ListPartitionReassignments(list_partition_reassignments::ListPartitionReassignmentsResponse),
    DescribeUserScramCredentials(describe_user_scram_credentials::DescribeUserScramCredentialsResponse),
    AlterUserScramCredentials(alter_user_scram_credentials::AlterUserScramCredentialsResponse),
}

/// The whole reply frame (header and body, no length prefix) to a decoded request.
/// Answering a request with another API's response is a programmer error.
pub fn reply(request: &RequestHeader, response: &Response) -> Bytes {
    assert_eq!(request.api_key, response.api_key(), "response for another API");
    encode_response(request, &response.encode(request.api_version))
}

/// KIP-511: the reply to an ApiVersions request whose version Gregor does not know
/// (`DecodeError::UnsupportedVersion` with api_key 18): UNSUPPORTED_VERSION and the supported
/// list, in v0 format under a v0 response header, so any client can read it and retry.
pub fn reply_api_versions_unsupported(request: &RequestHeader) -> Bytes {
    assert_eq!(request.api_key, api_versions::API_KEY);
    encode_response(
        request,
        &api_versions::ApiVersionsResponse::unsupported_version().encode(0),
    )
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::{ApiVersionsResponse, MetadataResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;

    use super::*;

    #[test]
    fn shared_name_reuses_the_last_name_only_when_equal() {
        let mut last = None;
        let a = shared_name(&mut last, "orders");
        let b = shared_name(&mut last, "orders");
        assert!(Arc::ptr_eq(&a, &b), "an equal name is the kept one");
        let c = shared_name(&mut last, "orderz");
        assert_eq!(&*c, "orderz", "one byte off is another name");
        assert!(
            last.as_ref().is_some_and(|l| Arc::ptr_eq(l, &c)),
            "and is kept from then on"
        );
        let d = shared_name(&mut last, "orders");
        assert_eq!(&*d, "orders");
        assert!(!Arc::ptr_eq(&a, &d), "only the last name is kept");
        assert_eq!(&*shared_name(&mut last, ""), "");
    }

    #[test]
    fn reply_frames_header_and_body() {
        // Metadata v9: header (key, version, correlation 6, null client id, no tags), then
        // null topics, auto-create, two authorized-operations flags, no tags.
        let frame = [0, 3, 0, 9, 0, 0, 0, 6, 0xff, 0xff, 0, 0, 1, 0, 0, 0];
        let (header, _) = decode_request(&frame, Limits::default()).expect("valid");
        let response = Response::Metadata(metadata::MetadataResponse::default());
        let mut frame: Bytes = reply(&header, &response);
        let h = ResponseHeader::decode(&mut frame, 1).expect("flexible header");
        assert_eq!(h.correlation_id, 6);
        MetadataResponse::decode(&mut frame, 9).expect("body");
        assert!(frame.is_empty());
    }

    #[test]
    fn unsupported_api_versions_reply_is_readable_as_v0() {
        let frame = [0, 18, 0, 99, 0, 0, 0, 8, 0xff, 0xff, 0];
        let Err(DecodeError::UnsupportedVersion { header }) = decode_request(&frame, Limits::default()) else {
            panic!("v99 must be unsupported");
        };
        let mut out = reply_api_versions_unsupported(&header);
        let h = ResponseHeader::decode(&mut out, 0).expect("v0 header");
        assert_eq!(h.correlation_id, 8);
        let body = ApiVersionsResponse::decode(&mut out, 0).expect("v0 body");
        assert_eq!(body.error_code, crate::ErrorCode::UnsupportedVersion.code());
        assert_eq!(body.api_keys.len(), supported_versions().len());
        assert!(out.is_empty());
    }
}
