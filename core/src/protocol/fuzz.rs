//! Property tests of the whole request decoder against hostile input: arbitrary bytes, valid
//! frames with arbitrary bodies, and valid frames (from the reference client encoder) mutated
//! by overwrites, truncation and insertion. The property is the decoder's contract: it returns
//! (Ok or a `DecodeError`) and never panics, and a forged count never reaches an allocation.
//! The client's response decoder gets the same treatment: a server's bytes are as hostile.

use proptest::prelude::*;

use super::api;
use super::{decode_request, decode_response, supported_versions, DecodeError, Limits, Request};

/// Every sample frame of every API, each a valid request at one supported version.
fn corpus() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    frames.extend(api::api_versions::tests::sample_frames());
    frames.extend(api::metadata::tests::sample_frames());
    frames.extend(api::produce::tests::sample_frames());
    frames.extend(api::fetch::tests::sample_frames());
    frames.extend(api::list_offsets::tests::sample_frames());
    frames.extend(api::create_topics::tests::sample_frames());
    frames.extend(api::find_coordinator::tests::sample_frames());
    frames.extend(api::join_group::tests::sample_frames());
    frames.extend(api::heartbeat::tests::sample_frames());
    frames.extend(api::leave_group::tests::sample_frames());
    frames.extend(api::sync_group::tests::sample_frames());
    frames.extend(api::describe_groups::tests::sample_frames());
    frames.extend(api::list_groups::tests::sample_frames());
    frames.extend(api::init_producer_id::tests::sample_frames());
    frames.extend(api::offset_for_leader_epoch::tests::sample_frames());
    frames.extend(api::offset_commit::tests::sample_frames());
    frames.extend(api::offset_fetch::tests::sample_frames());
    frames.extend(api::delete_topics::tests::sample_frames());
    frames.extend(api::describe_configs::tests::sample_frames());
    frames.extend(api::sasl_handshake::tests::sample_frames());
    frames.extend(api::sasl_authenticate::tests::sample_frames());
    frames.extend(api::describe_acls::tests::sample_frames());
    frames.extend(api::create_acls::tests::sample_frames());
    frames.extend(api::delete_acls::tests::sample_frames());
    frames.extend(api::elect_leaders::tests::sample_frames());
    frames.extend(api::alter_partition_reassignments::tests::sample_frames());
    frames.extend(api::list_partition_reassignments::tests::sample_frames());
    frames.extend(api::describe_user_scram_credentials::tests::sample_frames());
    frames.extend(api::alter_user_scram_credentials::tests::sample_frames());
    frames
}

#[test]
fn corpus_covers_every_supported_version_and_decodes() {
    let frames = corpus();
    for s in supported_versions() {
        for v in s.version_min..=s.version_max {
            let found = frames
                .iter()
                .any(|f| f[0..2] == s.api_key.to_be_bytes() && f[2..4] == v.to_be_bytes());
            assert!(found, "no sample frame for {} v{v}", s.name);
        }
    }
    for f in &frames {
        decode_request(f, Limits::default()).expect("every sample frame is valid");
    }
}

#[test]
fn supported_versions_are_sorted_and_sane() {
    let s = supported_versions();
    assert!(s.windows(2).all(|w| w[0].api_key < w[1].api_key));
    assert!(s.iter().all(|a| a.version_min <= a.version_max));
}

#[test]
fn every_truncation_of_every_valid_frame_is_an_error() {
    for f in corpus() {
        for len in 0..f.len() {
            let res = decode_request(&f[..len], Limits::default());
            assert!(res.is_err(), "a {len}-byte prefix of a {}-byte frame decoded", f.len());
        }
    }
}

#[test]
fn trailing_bytes_are_ignored_as_kafka_ignores_them() {
    let mut compared = 0;
    for f in corpus() {
        let Ok(plain) = decode_request(&f, Limits::default()) else {
            continue;
        };
        let mut longer = f.clone();
        longer.extend_from_slice(&[1, 0, 0]);
        assert_eq!(decode_request(&longer, Limits::default()).ok(), Some(plain), "{f:?}");
        compared += 1;
    }
    println!("{compared} requests decode the same with 3 bytes after the body");
    assert!(compared > 20, "compared {compared}");
}

/// librdkafka 2.16's Metadata v12 for every topic (confluent-kafka's `list_topics()`), as it
/// went over the wire: 3 stray bytes after the null topic array.
#[test]
fn librdkafka_all_topics_metadata_v12_decodes() {
    let frame: Vec<u8> = [
        &[0x00, 0x03, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x03, 0x00, 0x07][..],
        b"rdkafka",
        &[0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00],
    ]
    .concat();
    let (header, request) = decode_request(&frame, Limits::default()).expect("decodes");
    assert_eq!((header.api_key, header.api_version), (3, 12));
    let Request::Metadata(m) = request else {
        panic!("not Metadata: {request:?}")
    };
    assert_eq!(m.topics, None, "every topic");
}

#[test]
fn frames_over_request_bytes_max_are_refused_unread() {
    let limits = Limits {
        request_bytes_max: 8,
        ..Limits::default()
    };
    let res = decode_request(&[0u8; 9], limits);
    assert!(matches!(res, Err(DecodeError::FrameTooLarge { len: 9, max: 8 })));
}

/// Huge counts at every array position of every API: each must fail on the count, before
/// anything is allocated for it.
#[test]
fn forged_array_counts_fail_before_allocating() {
    for f in corpus() {
        for at in 10..f.len().saturating_sub(4) {
            let mut g = f.clone();
            g[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
            // Whatever this hits, it must not panic or abort on allocation.
            let _ = decode_request(&g, Limits::default());
            let mut g = f.clone();
            g[at..at + 5].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
            let _ = decode_request(&g, Limits::default());
        }
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Overwrite(usize, u8),
    Truncate(usize),
    Insert(usize, u8),
    Remove(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Overwrite(i, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<usize>().prop_map(Mutation::Remove),
    ]
}

fn apply(frame: &mut Vec<u8>, m: &Mutation) {
    if frame.is_empty() {
        return;
    }
    let n = frame.len();
    match *m {
        Mutation::Overwrite(i, b) => frame[i % n] = b,
        Mutation::Truncate(i) => frame.truncate(i % n),
        Mutation::Insert(i, b) => frame.insert(i % n, b),
        Mutation::Remove(i) => {
            frame.remove(i % n);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_request(&bytes, Limits::default());
    }

    #[test]
    fn valid_header_then_arbitrary_body_never_panics(
        api in 0usize..64,
        version in any::<i16>(),
        body in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let s = supported_versions();
        let support = &s[api % s.len()];
        let v = if version >= 0 {
            support.version_min + version % (support.version_max - support.version_min + 1)
        } else {
            version
        };
        let mut frame = Vec::new();
        frame.extend_from_slice(&support.api_key.to_be_bytes());
        frame.extend_from_slice(&v.to_be_bytes());
        frame.extend_from_slice(&[0, 0, 0, 1, 0xff, 0xff]);
        frame.extend_from_slice(&body);
        let _ = decode_request(&frame, Limits::default());
    }

    #[test]
    fn mutated_valid_requests_never_panic(
        pick in any::<usize>(),
        mutations in proptest::collection::vec(mutation(), 1..8),
    ) {
        let frames = corpus();
        let mut frame = frames[pick % frames.len()].clone();
        for m in &mutations {
            apply(&mut frame, m);
        }
        let _ = decode_request(&frame, Limits::default());
    }
}

/// Every response frame (with header) of every API and version, and what it answers.
fn response_corpus() -> Vec<(i16, i16, Vec<u8>)> {
    super::client::tests::response_frames()
}

/// Huge counts at every position of every response: each must fail or decode without
/// allocating for the count.
#[test]
fn forged_response_counts_fail_before_allocating() {
    for (api_key, v, f) in response_corpus() {
        for at in 4..f.len().saturating_sub(4) {
            let mut g = f.clone();
            g[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
            let _ = decode_response(api_key, v, &g, Limits::default());
            let mut g = f.clone();
            g[at..at + 5].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
            let _ = decode_response(api_key, v, &g, Limits::default());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_response_bytes_never_panic(
        api in 0usize..64,
        version in any::<i16>(),
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let s = supported_versions();
        let support = &s[api % s.len()];
        let v = if version >= 0 {
            support.version_min + version % (support.version_max - support.version_min + 1)
        } else {
            version
        };
        let _ = decode_response(support.api_key, v, &bytes, Limits::default());
    }

    #[test]
    fn mutated_valid_responses_never_panic(
        pick in any::<usize>(),
        mutations in proptest::collection::vec(mutation(), 1..8),
    ) {
        let frames = response_corpus();
        let (api_key, v, frame) = &frames[pick % frames.len()];
        let mut frame = frame.clone();
        for m in &mutations {
            apply(&mut frame, m);
        }
        let _ = decode_response(*api_key, *v, &frame, Limits::default());
    }

    /// A response decoded under a tight element budget still never panics, and a decode that
    /// succeeds stayed within it.
    #[test]
    fn responses_respect_a_tight_element_budget(pick in any::<usize>(), elements in 0usize..8) {
        let frames = response_corpus();
        let (api_key, v, frame) = &frames[pick % frames.len()];
        let limits = Limits { request_elements_max: elements, ..Limits::default() };
        match decode_response(*api_key, *v, frame, limits) {
            Ok(_) | Err(DecodeError::TooManyElements { .. }) => {}
            Err(e) => prop_assert!(false, "key {api_key} v{v}: {e}"),
        }
    }
}
