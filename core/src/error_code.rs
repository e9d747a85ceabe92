//! Kafka's error codes (the `ErrorCode` values of the wire protocol) that Gregor answers with.
//! One enum, so a code means the same thing in every API.

/// A Kafka protocol error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i16)]
pub enum ErrorCode {
    UnknownServerError = -1,
    None = 0,
    OffsetOutOfRange = 1,
    CorruptMessage = 2,
    UnknownTopicOrPartition = 3,
    InvalidFetchSize = 4,
    LeaderNotAvailable = 5,
    NotLeaderOrFollower = 6,
    RequestTimedOut = 7,
    MessageTooLarge = 10,
    OffsetMetadataTooLarge = 12,
    CoordinatorNotAvailable = 15,
    NotCoordinator = 16,
    InvalidTopicException = 17,
    RecordListTooLarge = 18,
    NotEnoughReplicas = 19,
    NotEnoughReplicasAfterAppend = 20,
    InvalidRequiredAcks = 21,
    IllegalGeneration = 22,
    InconsistentGroupProtocol = 23,
    InvalidGroupId = 24,
    UnknownMemberId = 25,
    InvalidSessionTimeout = 26,
    RebalanceInProgress = 27,
    InvalidCommitOffsetSize = 28,
    TopicAuthorizationFailed = 29,
    GroupAuthorizationFailed = 30,
    ClusterAuthorizationFailed = 31,
    UnsupportedSaslMechanism = 33,
    IllegalSaslState = 34,
    UnsupportedVersion = 35,
    TopicAlreadyExists = 36,
    InvalidPartitions = 37,
    InvalidReplicationFactor = 38,
    InvalidReplicaAssignment = 39,
    InvalidConfig = 40,
    InvalidRequest = 42,
    UnsupportedForMessageFormat = 43,
    OutOfOrderSequenceNumber = 45,
    DuplicateSequenceNumber = 46,
    InvalidProducerEpoch = 47,
    TransactionalIdAuthorizationFailed = 53,
    SecurityDisabled = 54,
    KafkaStorageError = 56,
    SaslAuthenticationFailed = 58,
    UnknownProducerId = 59,
    FencedLeaderEpoch = 74,
    UnknownLeaderEpoch = 75,
    MemberIdRequired = 79,
    PreferredLeaderNotAvailable = 80,
    GroupMaxSizeReached = 81,
    ElectionNotNeeded = 84,
    NoReassignmentInProgress = 85,
    InvalidRecord = 87,
    ResourceNotFound = 91,
    DuplicateResource = 92,
    UnacceptableCredential = 93,
    UnknownTopicId = 100,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 58] = [
        ErrorCode::UnknownServerError,
        ErrorCode::None,
        ErrorCode::OffsetOutOfRange,
        ErrorCode::CorruptMessage,
        ErrorCode::UnknownTopicOrPartition,
        ErrorCode::InvalidFetchSize,
        ErrorCode::LeaderNotAvailable,
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::RequestTimedOut,
        ErrorCode::MessageTooLarge,
        ErrorCode::OffsetMetadataTooLarge,
        ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotCoordinator,
        ErrorCode::InvalidTopicException,
        ErrorCode::RecordListTooLarge,
        ErrorCode::NotEnoughReplicas,
        ErrorCode::NotEnoughReplicasAfterAppend,
        ErrorCode::InvalidRequiredAcks,
        ErrorCode::IllegalGeneration,
        ErrorCode::InconsistentGroupProtocol,
        ErrorCode::InvalidGroupId,
        ErrorCode::UnknownMemberId,
        ErrorCode::InvalidSessionTimeout,
        ErrorCode::RebalanceInProgress,
        ErrorCode::InvalidCommitOffsetSize,
        ErrorCode::TopicAuthorizationFailed,
        ErrorCode::GroupAuthorizationFailed,
        ErrorCode::ClusterAuthorizationFailed,
        ErrorCode::UnsupportedSaslMechanism,
        ErrorCode::IllegalSaslState,
        ErrorCode::UnsupportedVersion,
        ErrorCode::TopicAlreadyExists,
        ErrorCode::InvalidPartitions,
        ErrorCode::InvalidReplicationFactor,
        ErrorCode::InvalidReplicaAssignment,
        ErrorCode::InvalidConfig,
        ErrorCode::InvalidRequest,
        ErrorCode::UnsupportedForMessageFormat,
        ErrorCode::OutOfOrderSequenceNumber,
        ErrorCode::DuplicateSequenceNumber,
        ErrorCode::InvalidProducerEpoch,
        ErrorCode::TransactionalIdAuthorizationFailed,
        ErrorCode::SecurityDisabled,
        ErrorCode::KafkaStorageError,
        ErrorCode::SaslAuthenticationFailed,
        ErrorCode::UnknownProducerId,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::MemberIdRequired,
        ErrorCode::PreferredLeaderNotAvailable,
        ErrorCode::GroupMaxSizeReached,
        ErrorCode::ElectionNotNeeded,
        ErrorCode::NoReassignmentInProgress,
        ErrorCode::InvalidRecord,
        ErrorCode::ResourceNotFound,
        ErrorCode::DuplicateResource,
        ErrorCode::UnacceptableCredential,
        ErrorCode::UnknownTopicId,
    ];

    pub fn code(self) -> i16 {
        self as i16
    }

    /// The enum for a code read off the wire; `None` for codes Gregor does not name.
    pub fn from_code(raw: i16) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.code() == raw)
    }

    /// Whether a client should retry the same request (Kafka's RetriableException).
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            ErrorCode::CorruptMessage
                | ErrorCode::UnknownTopicOrPartition
                | ErrorCode::LeaderNotAvailable
                | ErrorCode::NotLeaderOrFollower
                | ErrorCode::RequestTimedOut
                | ErrorCode::CoordinatorNotAvailable
                | ErrorCode::NotCoordinator
                | ErrorCode::NotEnoughReplicas
                | ErrorCode::NotEnoughReplicasAfterAppend
                | ErrorCode::KafkaStorageError
                | ErrorCode::FencedLeaderEpoch
                | ErrorCode::UnknownLeaderEpoch
                | ErrorCode::UnknownTopicId
        )
    }
}
