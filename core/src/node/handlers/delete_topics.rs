//! DeleteTopics (key 20) answered from the broker: each topic, named by name or (v6+) by id, is
//! deleted with its data through [`Broker::delete_topic`]. Per-topic errors: an unknown name gets
//! UNKNOWN_TOPIC_OR_PARTITION, an unknown id UNKNOWN_TOPIC_ID, a storage failure
//! KAFKA_STORAGE_ERROR; one topic's failure does not stop the others.

use crate::broker::{Broker, TopicId};
use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::protocol::api::delete_topics::{
    DeletableTopicResult, DeleteTopic, DeleteTopicsRequest, DeleteTopicsResponse,
};
use crate::protocol::Uuid;

/// The topic a DeleteTopics entry names, by name or (v6+) by an id this broker knows; shared
/// with cluster mode (`node::cluster`), which deletes through the controller instead.
pub fn topic_name(broker: &Broker, t: &DeleteTopic) -> Result<String, (ErrorCode, String)> {
    match (&t.name, t.topic_id) {
        (Some(name), _) if !name.is_empty() => Ok(name.clone()),
        (_, id) if id != Uuid::ZERO => broker.topic_by_id(TopicId(id.0)).map(|(name, _)| name.clone()).ok_or((
            ErrorCode::UnknownTopicId,
            format!("no topic with id {}", TopicId(id.0).to_hex()),
        )),
        _ => Err((
            ErrorCode::InvalidRequest,
            "a topic must be named by name or id".to_string(),
        )),
    }
}

pub fn delete_topics<D: Disk>(broker: &mut Broker, disk: &mut D, req: &DeleteTopicsRequest) -> DeleteTopicsResponse {
    let responses = req
        .topics
        .iter()
        .map(|t| {
            let name = topic_name(broker, t);
            let result = name.and_then(|name| broker.delete_topic(disk, &name).map(|id| (name, id)));
            match result {
                Ok((name, id)) => {
                    tracing::info!(topic = %name, "topic deleted");
                    DeletableTopicResult {
                        name: Some(name),
                        topic_id: Uuid(id.0),
                        error_code: 0,
                        error_message: None,
                    }
                }
                Err((code, message)) => DeletableTopicResult {
                    name: t.name.clone(),
                    topic_id: t.topic_id,
                    error_code: code.code(),
                    error_message: Some(message),
                },
            }
        })
        .collect();
    DeleteTopicsResponse {
        throttle_time_ms: 0,
        responses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::BrokerConfig;
    use crate::disk::mem::MemDisk;
    use crate::protocol::api::delete_topics::DeleteTopic;

    fn named(name: &str) -> DeleteTopic {
        DeleteTopic {
            name: Some(name.into()),
            topic_id: Uuid::ZERO,
        }
    }

    #[test]
    fn deletes_by_name_and_id_and_reports_unknown_ones_per_topic() {
        let mut disk = MemDisk::new();
        let mut broker = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
        for (i, name) in ["a", "b"].iter().enumerate() {
            let id = TopicId::from_random(i as u64 + 1, 7);
            broker
                .create_topic(&mut disk, name, 2, 1, &[], id, false)
                .expect("create");
        }
        let b_id = broker.topic("b").expect("b exists").id;
        let req = DeleteTopicsRequest {
            topics: vec![
                named("a"),
                named("nope"),
                DeleteTopic {
                    name: None,
                    topic_id: Uuid(b_id.0),
                },
                DeleteTopic {
                    name: None,
                    topic_id: Uuid([9; 16]),
                },
                DeleteTopic {
                    name: None,
                    topic_id: Uuid::ZERO,
                },
            ],
            timeout_ms: 1000,
        };
        let resp = delete_topics(&mut broker, &mut disk, &req);
        let codes: Vec<i16> = resp.responses.iter().map(|r| r.error_code).collect();
        assert_eq!(
            codes,
            [
                0,
                ErrorCode::UnknownTopicOrPartition.code(),
                0,
                ErrorCode::UnknownTopicId.code(),
                ErrorCode::InvalidRequest.code()
            ]
        );
        assert_eq!(resp.responses[2].name.as_deref(), Some("b"));
        assert!(
            broker.topics().is_empty(),
            "both topics are gone: {:?}",
            broker.topics().keys()
        );
        // The data is gone too: a reopened broker finds no topic.
        let reopened = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("reopen");
        assert!(reopened.topics().is_empty());
        // Deleting again is an error, not a crash.
        let again = delete_topics(
            &mut broker,
            &mut disk,
            &DeleteTopicsRequest {
                topics: vec![named("a")],
                timeout_ms: 0,
            },
        );
        assert_eq!(again.responses[0].error_code, ErrorCode::UnknownTopicOrPartition.code());
    }
}
