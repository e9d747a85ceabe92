//! DescribeUserScramCredentials and AlterUserScramCredentials: the answers, from the broker's
//! [`SaslConfig`] (its stored users and the config file's) and [`users::check_alter`]. Storing
//! is the caller's: the node's own store on a single node, the coordinator in cluster mode.
//!
//! Authorization as Kafka's `KafkaApis`: Describe on the Cluster to describe (else the whole
//! answer is CLUSTER_AUTHORIZATION_FAILED), Alter on the Cluster to alter (else every user's
//! result is). A listener without SASL has no credentials to manage: SECURITY_DISABLED.

use crate::error_code::ErrorCode;
use crate::protocol::api::alter_user_scram_credentials::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, AlterUserScramCredentialsResult,
};
use crate::protocol::api::describe_user_scram_credentials::{
    CredentialInfo, DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, UserScramCredentials,
};
use crate::security::users::{self, Change, Failure};
use crate::security::SaslConfig;

pub fn describe(
    sasl: Option<&SaslConfig>,
    req: &DescribeUserScramCredentialsRequest,
    authorized: bool,
) -> DescribeUserScramCredentialsResponse {
    let refused = |code: ErrorCode, why: &str| DescribeUserScramCredentialsResponse {
        error_code: code.code(),
        error_message: Some(why.to_string()),
        ..Default::default()
    };
    if !authorized {
        return refused(
            ErrorCode::ClusterAuthorizationFailed,
            "Describe on the Cluster is required",
        );
    }
    let Some(sasl) = sasl else {
        return refused(ErrorCode::SecurityDisabled, "this listener does not use SASL");
    };
    let mut by_user: std::collections::BTreeMap<String, Vec<CredentialInfo>> = Default::default();
    for (user, m, iterations) in sasl.scram_users() {
        by_user.entry(user).or_default().push(CredentialInfo {
            mechanism: users::mechanism_code(m),
            iterations: i32::try_from(iterations).unwrap_or(i32::MAX),
        });
    }
    let ok = |user: String, credential_infos: Vec<CredentialInfo>| UserScramCredentials {
        user,
        error_code: 0,
        error_message: None,
        credential_infos,
    };
    let failed = |user: &str, code: ErrorCode, why: String| UserScramCredentials {
        user: user.to_string(),
        error_code: code.code(),
        error_message: Some(why),
        credential_infos: Vec::new(),
    };
    let results = match &req.users {
        None => by_user.into_iter().map(|(u, c)| ok(u, c)).collect(),
        Some(names) => names
            .iter()
            .enumerate()
            .filter(|(i, name)| !names[..*i].contains(name))
            .map(|(_, name)| {
                if names.iter().filter(|n| *n == name).count() > 1 {
                    failed(
                        name,
                        ErrorCode::DuplicateResource,
                        "a user cannot be described twice in one request".into(),
                    )
                } else if let Some(c) = by_user.get(name) {
                    ok(name.clone(), c.clone())
                } else {
                    failed(
                        name,
                        ErrorCode::ResourceNotFound,
                        format!("attempt to describe a user credential that does not exist: {name}"),
                    )
                }
            })
            .collect(),
    };
    DescribeUserScramCredentialsResponse {
        results,
        ..Default::default()
    }
}

/// One entry per user named: the changes to store, or the answer already known.
pub type Checked = Vec<(String, Result<Vec<Change>, Failure>)>;

pub fn check_alter(req: &AlterUserScramCredentialsRequest, authorized: bool, has_sasl: bool) -> Checked {
    let mut checked = users::check_alter(req);
    let refusal = match (authorized, has_sasl) {
        (false, _) => Some((
            ErrorCode::ClusterAuthorizationFailed,
            "Alter on the Cluster is required",
        )),
        (true, false) => Some((ErrorCode::SecurityDisabled, "this listener does not use SASL")),
        (true, true) => None,
    };
    if let Some((code, why)) = refusal {
        for (_, r) in checked.iter_mut() {
            *r = Err((code, why.to_string()));
        }
    }
    checked
}

/// The valid part of `checked`, to hand to the store.
pub fn to_store(checked: &Checked) -> Vec<(String, Vec<Change>)> {
    checked
        .iter()
        .filter_map(|(u, r)| r.as_ref().ok().map(|c| (u.clone(), c.clone())))
        .collect()
}

/// The answer: each user's check, or else what storing its changes gave (`stored`, in order).
pub fn alter_response(checked: Checked, stored: Vec<Result<(), Failure>>) -> AlterUserScramCredentialsResponse {
    let mut stored = stored.into_iter();
    let results = checked
        .into_iter()
        .map(|(user, r)| {
            let outcome = r.and_then(|_| {
                stored
                    .next()
                    .unwrap_or_else(|| Err((ErrorCode::UnknownServerError, "no answer".into())))
            });
            match outcome {
                Ok(()) => {
                    tracing::info!(target: "users", %user, "SCRAM credentials altered");
                    AlterUserScramCredentialsResult {
                        user,
                        error_code: 0,
                        error_message: None,
                    }
                }
                Err((code, why)) => AlterUserScramCredentialsResult {
                    user,
                    error_code: code.code(),
                    error_message: Some(why),
                },
            }
        })
        .collect();
    AlterUserScramCredentialsResponse {
        throttle_time_ms: 0,
        results,
    }
}

/// Single node: stores into the node's own store.
pub fn alter_single_node(sasl: &SaslConfig, job: Vec<(String, Vec<Change>)>) -> Vec<Result<(), Failure>> {
    job.into_iter().map(|(u, c)| sasl.apply_stored(&u, &c)).collect()
}
