//! `gregor acls add|list|remove`: CreateAcls, DescribeAcls and DeleteAcls from the command line,
//! with `kafka-acls.sh`'s flags (`--allow-principal`, `--deny-principal`, `--operation`,
//! `--topic`, `--group`, `--cluster`, `--transactional-id`, `--allow-host`, `--deny-host`,
//! `--resource-pattern-type`). Every combination of principal, operation and resource named is
//! one binding, as kafka-acls.sh does. The connection is unauthenticated (User:ANONYMOUS) until
//! the CLI learns SASL; the broker must let it Alter the Cluster (e.g. via `super.users`).

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use gregor_core::client::{code, Cluster};
use gregor_core::protocol::api::create_acls::{AclCreation, CreateAclsRequest};
use gregor_core::protocol::api::delete_acls::DeleteAclsRequest;
use gregor_core::protocol::api::describe_acls::{AclFilterWire, DescribeAclsRequest};
use gregor_core::protocol::{Request, Response};
use gregor_core::security::acl::{Operation, PatternType, Permission, ResourceType, CLUSTER_NAME};

use super::ConnectArgs;
use crate::runtime::RealRuntime;

/// The version every ACL request is sent at (flexible; Kafka 2.4+).
pub const ACLS_VERSION: i16 = 2;

#[derive(Subcommand, Debug)]
pub enum AclsCommand {
    /// Adds ACLs.
    Add(AclArgs),
    /// Lists the ACLs matching the given resource and principal (all when none is given).
    List(AclArgs),
    /// Removes the ACLs matching the given flags.
    Remove(AclArgs),
}

#[derive(Args, Debug, Default)]
pub struct AclArgs {
    #[arg(long = "allow-principal")]
    allow_principals: Vec<String>,
    #[arg(long = "deny-principal")]
    deny_principals: Vec<String>,
    /// Hosts the allow entries apply to (default `*`).
    #[arg(long = "allow-host")]
    allow_hosts: Vec<String>,
    /// Hosts the deny entries apply to (default `*`).
    #[arg(long = "deny-host")]
    deny_hosts: Vec<String>,
    /// Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
    /// AlterConfigs, IdempotentWrite, All.
    #[arg(long = "operation")]
    operations: Vec<String>,
    #[arg(long = "topic")]
    topics: Vec<String>,
    #[arg(long = "group")]
    groups: Vec<String>,
    #[arg(long = "transactional-id")]
    transactional_ids: Vec<String>,
    #[arg(long)]
    cluster: bool,
    /// literal (default) or prefixed; for list and remove also any or match.
    #[arg(long = "resource-pattern-type", default_value = "literal")]
    resource_pattern_type: String,
    /// list: only the ACLs of this principal.
    #[arg(long)]
    principal: Option<String>,
}

impl AclArgs {
    fn pattern_type(&self) -> anyhow::Result<PatternType> {
        PatternType::parse(&self.resource_pattern_type)
            .with_context(|| format!("unknown --resource-pattern-type {:?}", self.resource_pattern_type))
    }

    fn resources(&self) -> Vec<(ResourceType, String)> {
        let mut out: Vec<(ResourceType, String)> = Vec::new();
        out.extend(self.topics.iter().map(|t| (ResourceType::Topic, t.clone())));
        out.extend(self.groups.iter().map(|g| (ResourceType::Group, g.clone())));
        out.extend(
            self.transactional_ids
                .iter()
                .map(|t| (ResourceType::TransactionalId, t.clone())),
        );
        if self.cluster {
            out.push((ResourceType::Cluster, CLUSTER_NAME.to_string()));
        }
        out
    }

    fn operations(&self, default: Operation) -> anyhow::Result<Vec<Operation>> {
        if self.operations.is_empty() {
            return Ok(vec![default]);
        }
        self.operations
            .iter()
            .map(|o| Operation::parse(o).with_context(|| format!("unknown --operation {o:?}")))
            .collect()
    }

    /// (principal, host, permission) for every principal and host named.
    fn entries(&self) -> Vec<(String, String, Permission)> {
        let hosts = |h: &[String]| {
            if h.is_empty() {
                vec!["*".to_string()]
            } else {
                h.to_vec()
            }
        };
        let mut out = Vec::new();
        for p in &self.allow_principals {
            out.extend(
                hosts(&self.allow_hosts)
                    .into_iter()
                    .map(|h| (p.clone(), h, Permission::Allow)),
            );
        }
        for p in &self.deny_principals {
            out.extend(
                hosts(&self.deny_hosts)
                    .into_iter()
                    .map(|h| (p.clone(), h, Permission::Deny)),
            );
        }
        out
    }
}

pub fn run(connect: &ConnectArgs, command: AclsCommand) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
    super::run(async move {
        let out = match command {
            AclsCommand::Add(args) => add(&mut cluster, &args).await?,
            AclsCommand::List(args) => list(&mut cluster, &args).await?,
            AclsCommand::Remove(args) => remove(&mut cluster, &args).await?,
        };
        print!("{out}");
        Ok(())
    })
}

async fn call(cluster: &mut Cluster<RealRuntime>, request: Request) -> anyhow::Result<Response> {
    cluster
        .call_any(&request, ACLS_VERSION)
        .await
        .context("cannot reach the cluster")
}

pub async fn add(cluster: &mut Cluster<RealRuntime>, args: &AclArgs) -> anyhow::Result<String> {
    let pattern_type = args.pattern_type()?;
    let resources = args.resources();
    let entries = args.entries();
    if resources.is_empty() || entries.is_empty() {
        bail!("add needs a resource (--topic, --group, --transactional-id, --cluster) and --allow-principal or --deny-principal");
    }
    let mut creations = Vec::new();
    for (resource_type, name) in &resources {
        for op in args.operations(Operation::All)? {
            for (principal, host, permission) in &entries {
                creations.push(AclCreation {
                    resource_type: resource_type.code(),
                    resource_name: name.clone(),
                    pattern_type: pattern_type.code(),
                    principal: principal.clone(),
                    host: host.clone(),
                    operation: op.code(),
                    permission_type: permission.code(),
                });
            }
        }
    }
    let n = creations.len();
    let Response::CreateAcls(resp) = call(cluster, Request::CreateAcls(CreateAclsRequest { creations })).await? else {
        bail!("CreateAcls answered with another API");
    };
    for r in &resp.results {
        if r.error_code != 0 {
            bail!(
                "cannot add ACLs: {:?}: {}",
                code(r.error_code),
                r.error_message.as_deref().unwrap_or("")
            );
        }
    }
    Ok(format!("Added {n} ACLs.\n"))
}

fn filters(args: &AclArgs, pattern_default: PatternType) -> anyhow::Result<Vec<AclFilterWire>> {
    let pattern_type = if args.resource_pattern_type == "literal" {
        pattern_default
    } else {
        args.pattern_type()?
    };
    let mut resources: Vec<(ResourceType, Option<String>)> =
        args.resources().into_iter().map(|(t, n)| (t, Some(n))).collect();
    if resources.is_empty() {
        resources.push((ResourceType::Any, None));
    }
    let mut principals: Vec<Option<String>> = args
        .allow_principals
        .iter()
        .chain(&args.deny_principals)
        .chain(&args.principal)
        .cloned()
        .map(Some)
        .collect();
    if principals.is_empty() {
        principals.push(None);
    }
    let operations: Vec<Operation> = if args.operations.is_empty() {
        vec![Operation::Any]
    } else {
        args.operations(Operation::Any)?
    };
    let mut out = Vec::new();
    for (t, name) in &resources {
        for p in &principals {
            for op in &operations {
                out.push(AclFilterWire {
                    resource_type: t.code(),
                    resource_name: name.clone(),
                    pattern_type: pattern_type.code(),
                    principal: p.clone(),
                    host: None,
                    operation: op.code(),
                    permission_type: Permission::Any.code(),
                });
            }
        }
    }
    Ok(out)
}

pub async fn list(cluster: &mut Cluster<RealRuntime>, args: &AclArgs) -> anyhow::Result<String> {
    let mut out = String::new();
    for filter in filters(args, PatternType::Any)? {
        let Response::DescribeAcls(resp) = call(cluster, Request::DescribeAcls(DescribeAclsRequest { filter })).await?
        else {
            bail!("DescribeAcls answered with another API");
        };
        if resp.error_code != 0 {
            bail!(
                "cannot list ACLs: {:?}: {}",
                code(resp.error_code),
                resp.error_message.as_deref().unwrap_or("")
            );
        }
        for r in &resp.resources {
            let name = |c: i8, f: fn(i8) -> Option<&'static str>| f(c).unwrap_or("Unknown").to_string();
            out.push_str(&format!(
                "Current ACLs for resource `ResourcePattern(resourceType={}, name={}, patternType={})`:\n",
                name(r.resource_type, |c| ResourceType::from_code(c).map(|t| t.name())),
                r.resource_name,
                name(r.pattern_type, |c| PatternType::from_code(c).map(|t| t.name())),
            ));
            for a in &r.acls {
                out.push_str(&format!(
                    " \t(principal={}, host={}, operation={}, permissionType={})\n",
                    a.principal,
                    a.host,
                    Operation::from_code(a.operation).map_or("Unknown", |o| o.name()),
                    Permission::from_code(a.permission_type).map_or("Unknown", |p| p.name()),
                ));
            }
        }
    }
    Ok(out)
}

pub async fn remove(cluster: &mut Cluster<RealRuntime>, args: &AclArgs) -> anyhow::Result<String> {
    if args.resources().is_empty() {
        bail!("remove needs a resource (--topic, --group, --transactional-id, --cluster)");
    }
    let filters = filters(args, PatternType::Literal)?;
    let Response::DeleteAcls(resp) = call(cluster, Request::DeleteAcls(DeleteAclsRequest { filters })).await? else {
        bail!("DeleteAcls answered with another API");
    };
    let mut removed = 0;
    for r in &resp.filter_results {
        if r.error_code != 0 {
            bail!(
                "cannot remove ACLs: {:?}: {}",
                code(r.error_code),
                r.error_message.as_deref().unwrap_or("")
            );
        }
        removed += r.matching_acls.len();
    }
    Ok(format!("Removed {removed} ACLs.\n"))
}
