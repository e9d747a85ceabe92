//! One module per Kafka API: the request we decode, the response we encode, and the versions of
//! each. Every module exports `API_KEY`, `VERSION_MIN`, `VERSION_MAX` (what Gregor both decodes
//! and encodes) and `FLEXIBLE_MIN` (the first version using compact encodings and tagged fields,
//! as in Kafka's message JSON schemas).

pub mod alter_partition_reassignments;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod create_acls;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
