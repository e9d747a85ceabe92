//! `gregor users add|delete|list`: SCRAM users through AlterUserScramCredentials and
//! DescribeUserScramCredentials, as `kafka-configs.sh --entity-type users --alter
//! --add-config 'SCRAM-SHA-256=[iterations=N,password=P]'` does. The CLI salts (64 random
//! bytes) and iterates the password itself; only the salted password travels, and the broker
//! stores the keys derived from it. `list` prints names, mechanisms and iteration counts, never
//! a secret. The broker must let the CLI's principal Alter (add, delete) or Describe (list) the
//! Cluster when an authorizer is on, e.g. a `super.users` login with `--sasl-user`.

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::{Args, Subcommand};
use gregor_core::client::code;
use gregor_core::protocol::api::alter_user_scram_credentials::{
    AlterUserScramCredentialsRequest, ScramCredentialDeletion, ScramCredentialUpsertion,
};
use gregor_core::protocol::api::describe_user_scram_credentials::DescribeUserScramCredentialsRequest;
use gregor_core::protocol::{Request, Response};
use gregor_core::security::scram;
use gregor_core::security::users::{mechanism_code, mechanism_of_code};
use gregor_core::security::Mechanism;
use rand_core::RngCore;

use super::ConnectArgs;

/// Both APIs exist only at v0 (flexible).
const USERS_VERSION: i16 = 0;
/// Random salt bytes per credential.
const SALT_BYTES: usize = 32;

#[derive(Subcommand, Debug)]
pub enum UsersCommand {
    /// Adds a SCRAM user, or replaces its credential for the mechanism.
    Add(AddArgs),
    /// Deletes a user's SCRAM credential for the mechanism.
    Delete(DeleteArgs),
    /// Lists SCRAM users: names, mechanisms and iteration counts.
    List(ListArgs),
}

#[derive(Args, Debug)]
pub struct AddArgs {
    name: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, default_value = "SCRAM-SHA-256")]
    mechanism: String,
    #[arg(long)]
    password: String,
    /// PBKDF2 iterations (Kafka's 4096..=16384).
    #[arg(long, default_value_t = scram::ITERATIONS_MIN)]
    iterations: u32,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    name: String,
    #[arg(long, default_value = "SCRAM-SHA-256")]
    mechanism: String,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only these users (all when none is named).
    names: Vec<String>,
}

fn scram_mechanism(name: &str) -> anyhow::Result<Mechanism> {
    Mechanism::parse(name)
        .filter(|m| *m != Mechanism::Plain)
        .with_context(|| format!("--mechanism {name:?}: SCRAM-SHA-256 or SCRAM-SHA-512"))
}

pub fn run(connect: &ConnectArgs, command: UsersCommand) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
    let request = match &command {
        UsersCommand::Add(args) => {
            let m = scram_mechanism(&args.mechanism)?;
            let mut salt = vec![0u8; SALT_BYTES];
            rand_core::OsRng.fill_bytes(&mut salt);
            // Bounded by the broker too; checked here so a typo does not spin for long.
            if !(scram::ITERATIONS_MIN..=scram::ITERATIONS_MAX).contains(&args.iterations) {
                bail!(
                    "--iterations must be {}..={}",
                    scram::ITERATIONS_MIN,
                    scram::ITERATIONS_MAX
                );
            }
            let salted = scram::hi(m, args.password.as_bytes(), &salt, args.iterations);
            Request::AlterUserScramCredentials(AlterUserScramCredentialsRequest {
                deletions: Vec::new(),
                upsertions: vec![ScramCredentialUpsertion {
                    name: args.name.clone(),
                    mechanism: mechanism_code(m),
                    iterations: i32::try_from(args.iterations).context("--iterations")?,
                    salt: Bytes::from(salt),
                    salted_password: Bytes::from(salted),
                }],
            })
        }
        UsersCommand::Delete(args) => Request::AlterUserScramCredentials(AlterUserScramCredentialsRequest {
            deletions: vec![ScramCredentialDeletion {
                name: args.name.clone(),
                mechanism: mechanism_code(scram_mechanism(&args.mechanism)?),
            }],
            upsertions: Vec::new(),
        }),
        UsersCommand::List(args) => Request::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest {
            users: (!args.names.is_empty()).then(|| args.names.clone()),
        }),
    };
    super::run(async move {
        let resp = cluster
            .call_any(&request, USERS_VERSION)
            .await
            .context("cannot reach the cluster")?;
        let out = match (&command, resp) {
            (UsersCommand::List(_), Response::DescribeUserScramCredentials(resp)) => {
                if resp.error_code != 0 {
                    bail!(
                        "cannot list users: {:?}: {}",
                        code(resp.error_code),
                        resp.error_message.unwrap_or_default()
                    );
                }
                let mut out = String::new();
                for r in resp.results {
                    if r.error_code != 0 {
                        bail!(
                            "user {:?}: {:?}: {}",
                            r.user,
                            code(r.error_code),
                            r.error_message.unwrap_or_default()
                        );
                    }
                    for c in r.credential_infos {
                        let m = mechanism_of_code(c.mechanism).map_or("UNKNOWN", |m| m.name());
                        out.push_str(&format!("{}\t{m}\titerations={}\n", r.user, c.iterations));
                    }
                }
                out
            }
            (UsersCommand::Add(_) | UsersCommand::Delete(_), Response::AlterUserScramCredentials(resp)) => {
                for r in &resp.results {
                    if r.error_code != 0 {
                        bail!(
                            "user {:?}: {:?}: {}",
                            r.user,
                            code(r.error_code),
                            r.error_message.as_deref().unwrap_or("")
                        );
                    }
                }
                match &command {
                    UsersCommand::Add(a) => format!("Added SCRAM user {} ({}).\n", a.name, a.mechanism),
                    _ => "Deleted.\n".to_string(),
                }
            }
            _ => bail!("the broker answered with another API"),
        };
        print!("{out}");
        Ok(())
    })
}
