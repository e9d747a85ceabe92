//! SCRAM users as the coordinator stores them, after Kafka's ZooKeeper layout, and the rules
//! AlterUserScramCredentials / DescribeUserScramCredentials follow (shared by a single node,
//! whose [`SaslConfig`](super::SaslConfig) is the store, and the cluster's sync task).
//!
//! | path | data |
//! |---|---|
//! | `/config/users/{name}` | one line per mechanism: `SCRAM-SHA-256 salt=B64,stored_key=B64,server_key=B64,iterations=N` |
//!
//! Only derived keys are stored (RFC 5802's StoredKey and ServerKey), never a password nor the
//! salted password, which a client could log in with. Names are escaped as ACL names are, to
//! stay one path component. Decoding is total: bad bytes give `None`, never a panic.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

use super::acl::znode::{escape, unescape};
use super::sasl::Mechanism;
use super::scram::{self, ScramCredential};
use crate::error_code::ErrorCode;
use crate::protocol::api::alter_user_scram_credentials::AlterUserScramCredentialsRequest;

pub const CONFIG_ROOT: &str = "/config";
pub const USERS_ROOT: &str = "/config/users";
/// Longest user name accepted (Kafka bounds none; this keeps znode names and logs sane).
pub const USER_NAME_BYTES_MAX: usize = 255;
/// Longest salt accepted (Kafka's client sends 64 bytes).
pub const SALT_BYTES_MAX: usize = 1024;

/// One user's credentials, by mechanism.
pub type UserCredentials = BTreeMap<Mechanism, ScramCredential>;
/// Every stored user.
pub type StoredUsers = BTreeMap<String, UserCredentials>;
/// An error code and a message without secrets.
pub type Failure = (ErrorCode, String);

/// The persistent parents to create before any user znode.
pub fn parent_paths() -> [&'static str; 2] {
    [CONFIG_ROOT, USERS_ROOT]
}

pub fn user_path(name: &str) -> String {
    format!("{USERS_ROOT}/{}", escape(name))
}

/// The user a child of [`USERS_ROOT`] stores; `None` for a name no writer produces.
pub fn user_of(child: &str) -> Option<String> {
    unescape(child).filter(|n| !n.is_empty() && escape(n) == child)
}

/// Kafka's `ScramMechanism` codes on the wire: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (0 UNKNOWN).
pub fn mechanism_code(m: Mechanism) -> i8 {
    match m {
        Mechanism::ScramSha256 => 1,
        Mechanism::ScramSha512 => 2,
        Mechanism::Plain => 0,
    }
}

pub fn mechanism_of_code(code: i8) -> Option<Mechanism> {
    match code {
        1 => Some(Mechanism::ScramSha256),
        2 => Some(Mechanism::ScramSha512),
        _ => None,
    }
}

/// The stored credential for a client-salted password (what an upsertion carries).
pub fn credential_from_salted(m: Mechanism, salted_password: &[u8], salt: &[u8], iterations: u32) -> ScramCredential {
    let client_key = scram::hmac(m, salted_password, b"Client Key");
    ScramCredential {
        salt: salt.to_vec(),
        stored_key: scram::hash(m, &client_key),
        server_key: scram::hmac(m, salted_password, b"Server Key"),
        iterations,
    }
}

pub fn encode_user(creds: &UserCredentials) -> Vec<u8> {
    let mut s = String::new();
    for (m, c) in creds {
        let _ = writeln!(
            s,
            "{} salt={},stored_key={},server_key={},iterations={}",
            m.name(),
            B64.encode(&c.salt),
            B64.encode(&c.stored_key),
            B64.encode(&c.server_key),
            c.iterations
        );
    }
    s.into_bytes()
}

pub fn decode_user(bytes: &[u8]) -> Option<UserCredentials> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut out = UserCredentials::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (name, rest) = line.split_once(' ')?;
        let m = Mechanism::parse(name).filter(|m| *m != Mechanism::Plain)?;
        let mut fields = BTreeMap::new();
        for part in rest.split(',') {
            let (k, v) = part.split_once('=')?;
            fields.insert(k, v);
        }
        let b64 = |k: &str| fields.get(k).and_then(|v| B64.decode(v).ok());
        let iterations: u32 = fields.get("iterations")?.parse().ok()?;
        if !(scram::ITERATIONS_MIN..=scram::ITERATIONS_MAX).contains(&iterations) {
            return None;
        }
        let c = ScramCredential {
            salt: b64("salt")?,
            stored_key: b64("stored_key")?,
            server_key: b64("server_key")?,
            iterations,
        };
        out.insert(m, c);
    }
    Some(out)
}

/// One change to one user's credentials: a new one, or `None` to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub mechanism: Mechanism,
    pub credential: Option<ScramCredential>,
}

/// Applies `changes` to one user's credentials. Deleting a credential the user does not have is
/// RESOURCE_NOT_FOUND, and then nothing changes.
pub fn apply(creds: &mut UserCredentials, changes: &[Change]) -> Result<(), Failure> {
    let mut after = creds.clone();
    for c in changes {
        match &c.credential {
            Some(cred) => {
                after.insert(c.mechanism, cred.clone());
            }
            None => {
                if after.remove(&c.mechanism).is_none() {
                    return Err((
                        ErrorCode::ResourceNotFound,
                        format!(
                            "attempt to delete a {} credential that does not exist",
                            c.mechanism.name()
                        ),
                    ));
                }
            }
        }
    }
    *creds = after;
    Ok(())
}

/// Judges an AlterUserScramCredentials request as Kafka does, one entry per user in the order
/// first named: the changes to make, or why none is made for that user. Empty names and bad
/// iteration counts or keys are UNACCEPTABLE_CREDENTIAL, unknown mechanisms
/// UNSUPPORTED_SASL_MECHANISM, a user named by two operations DUPLICATE_RESOURCE (for all of
/// them: which one was meant is unknown).
pub fn check_alter(req: &AlterUserScramCredentialsRequest) -> Vec<(String, Result<Vec<Change>, Failure>)> {
    let mut out: Vec<(String, Result<Vec<Change>, Failure>)> = Vec::new();
    let mut push = |user: &str, r: Result<Change, Failure>| {
        if let Some((_, prev)) = out.iter_mut().find(|(u, _)| u == user) {
            *prev = Err((
                ErrorCode::DuplicateResource,
                "a user's credentials cannot be altered twice in one request".into(),
            ));
        } else {
            out.push((user.to_string(), r.map(|c| vec![c])));
        }
    };
    for d in &req.deletions {
        let r = check_name(&d.name).and_then(|()| {
            let mechanism = mechanism_of_code(d.mechanism).ok_or(unknown_mechanism(d.mechanism))?;
            Ok(Change {
                mechanism,
                credential: None,
            })
        });
        push(&d.name, r);
    }
    for u in &req.upsertions {
        let r = check_name(&u.name).and_then(|()| {
            let mechanism = mechanism_of_code(u.mechanism).ok_or(unknown_mechanism(u.mechanism))?;
            let iterations = u32::try_from(u.iterations).unwrap_or(0);
            if iterations < scram::ITERATIONS_MIN {
                return Err(unacceptable(format!(
                    "too few iterations: {} < {}",
                    u.iterations,
                    scram::ITERATIONS_MIN
                )));
            }
            if iterations > scram::ITERATIONS_MAX {
                return Err(unacceptable(format!(
                    "too many iterations: {} > {}",
                    u.iterations,
                    scram::ITERATIONS_MAX
                )));
            }
            if u.salt.is_empty() || u.salt.len() > SALT_BYTES_MAX {
                return Err(unacceptable("the salt must be 1 to 1024 bytes".into()));
            }
            if u.salted_password.len() != scram::hash(mechanism, b"").len() {
                return Err(unacceptable(format!(
                    "a {} salted password is {} bytes",
                    mechanism.name(),
                    scram::hash(mechanism, b"").len()
                )));
            }
            Ok(Change {
                mechanism,
                credential: Some(credential_from_salted(
                    mechanism,
                    &u.salted_password,
                    &u.salt,
                    iterations,
                )),
            })
        });
        push(&u.name, r);
    }
    out
}

fn check_name(name: &str) -> Result<(), Failure> {
    if name.is_empty() {
        return Err(unacceptable("the user name must not be empty".into()));
    }
    if name.len() > USER_NAME_BYTES_MAX {
        return Err(unacceptable(format!(
            "user names are at most {USER_NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

fn unacceptable(why: String) -> Failure {
    (ErrorCode::UnacceptableCredential, why)
}

fn unknown_mechanism(code: i8) -> Failure {
    (
        ErrorCode::UnsupportedSaslMechanism,
        format!("unknown SCRAM mechanism code {code}"),
    )
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::coord::tree::validate_path;
    use crate::protocol::api::alter_user_scram_credentials::{ScramCredentialDeletion, ScramCredentialUpsertion};

    fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
        let m = mechanism_of_code(mechanism).unwrap_or(Mechanism::ScramSha256);
        ScramCredentialUpsertion {
            name: name.into(),
            mechanism,
            iterations,
            salt: Bytes::from_static(b"NaCl"),
            salted_password: Bytes::from(scram::hi(m, b"pw", b"NaCl", 4096)),
        }
    }

    #[test]
    fn a_user_round_trips_through_its_znode_without_the_password() {
        let mut creds = UserCredentials::new();
        for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            creds.insert(m, ScramCredential::from_password(m, "s3cret-pw", b"salty", 8192));
        }
        let bytes = encode_user(&creds);
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert!(!text.contains("s3cret-pw"), "password stored: {text}");
        assert!(text.starts_with("SCRAM-SHA-256 salt="), "{text}");
        assert_eq!(decode_user(&bytes), Some(creds));
        assert_eq!(decode_user(b""), Some(UserCredentials::new()));
        for bad in [
            &b"SCRAM-SHA-256 salt=!!"[..],
            b"PLAIN salt=,stored_key=,server_key=,iterations=4096",
            b"\xff",
        ] {
            assert_eq!(decode_user(bad), None, "{bad:?}");
        }
        let low = b"SCRAM-SHA-256 salt=AA==,stored_key=AA==,server_key=AA==,iterations=1";
        assert_eq!(decode_user(low), None, "iterations below the minimum are refused");
    }

    #[test]
    fn names_stay_one_path_component() {
        for name in ["alice", "a/b", "..", "50%", "x y"] {
            let path = user_path(name);
            validate_path(&path).unwrap_or_else(|e| panic!("{path}: {e:?}"));
            let child = path.rsplit('/').next().expect("a child");
            assert_eq!(user_of(child).as_deref(), Some(name));
        }
        assert_eq!(user_of("%zz"), None);
    }

    #[test]
    fn a_salted_upsertion_gives_the_credential_the_password_gives() {
        let m = Mechanism::ScramSha256;
        let salted = scram::hi(m, b"pw", b"NaCl", 4096);
        assert_eq!(
            credential_from_salted(m, &salted, b"NaCl", 4096),
            ScramCredential::from_password(m, "pw", b"NaCl", 4096)
        );
    }

    #[test]
    fn alter_checks_answer_with_kafkas_codes() {
        let req = AlterUserScramCredentialsRequest {
            deletions: vec![
                ScramCredentialDeletion {
                    name: "dave".into(),
                    mechanism: 2,
                },
                ScramCredentialDeletion {
                    name: "erin".into(),
                    mechanism: 9,
                },
            ],
            upsertions: vec![
                upsert("alice", 1, 4096),
                upsert("", 1, 4096),
                upsert("bob", 1, 4095),
                upsert("carol", 1, 16385),
                upsert("dave", 1, 4096),
                upsert("frank", 0, 4096),
            ],
        };
        let got: Vec<(String, ErrorCode)> = check_alter(&req)
            .into_iter()
            .map(|(u, r)| (u, r.err().map_or(ErrorCode::None, |(c, _)| c)))
            .collect();
        let want = vec![
            ("dave".to_string(), ErrorCode::DuplicateResource),
            ("erin".to_string(), ErrorCode::UnsupportedSaslMechanism),
            ("alice".to_string(), ErrorCode::None),
            (String::new(), ErrorCode::UnacceptableCredential),
            ("bob".to_string(), ErrorCode::UnacceptableCredential),
            ("carol".to_string(), ErrorCode::UnacceptableCredential),
            ("frank".to_string(), ErrorCode::UnsupportedSaslMechanism),
        ];
        println!("compared {} per-user results", want.len());
        assert_eq!(got, want);
    }

    #[test]
    fn deleting_a_missing_credential_is_resource_not_found_and_changes_nothing() {
        let m = Mechanism::ScramSha256;
        let mut creds = UserCredentials::new();
        let add = Change {
            mechanism: m,
            credential: Some(ScramCredential::from_password(m, "pw", b"s", 4096)),
        };
        apply(&mut creds, std::slice::from_ref(&add)).expect("added");
        let del512 = Change {
            mechanism: Mechanism::ScramSha512,
            credential: None,
        };
        let err = apply(&mut creds, &[del512]).expect_err("no SHA-512 credential");
        assert_eq!(err.0, ErrorCode::ResourceNotFound);
        assert_eq!(creds.len(), 1, "a failed change leaves the user as it was");
        apply(
            &mut creds,
            &[Change {
                mechanism: m,
                credential: None,
            }],
        )
        .expect("deleted");
        assert!(creds.is_empty());
    }
}
