//! Kafka's ACL model and the authorization decision, as pure values and functions.
//!
//! Owns: resource types, pattern types, operations and permissions with Kafka's wire codes; the
//! bindings (`pattern` + `entry`) the coordinator stores and the brokers cache ([`AclSet`]); the
//! filters of DescribeAcls / DeleteAcls; and [`Authorizer::authorize`], Kafka's `AclAuthorizer`
//! decision:
//!
//! 1. a principal in `super.users` may do anything;
//! 2. the ACLs that apply to a resource are its LITERAL ones, the LITERAL `*` of its type, and the
//!    PREFIXED ones whose prefix starts its name;
//! 3. none apply: allowed only with `allow.everyone.if.no.acl.found=true`;
//! 4. a DENY matching principal (or `User:*`), host (or `*`) and operation (or `All`) refuses;
//! 5. otherwise an ALLOW matching the same way (Read, Write, Delete and Alter also allow Describe;
//!    AlterConfigs also allows DescribeConfigs) permits; nothing matching refuses.
//!
//! Deny always wins: no set of ALLOW entries can outweigh one matching DENY.
//! Everything here is total on untrusted input (wire codes, znode bytes): unknown codes and bad
//! bytes give `None` or `Unknown`, never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::Principal;

pub mod znode;

macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($variant,)*
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// Kafka's wire code (an INT8).
            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)*
                }
            }

            /// The value of a wire code; `None` for a code Kafka does not define.
            pub fn from_code(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }

            /// As Kafka's tools spell it (`Topic`, `Read`, `Prefixed`), case-insensitively.
            pub fn parse(text: &str) -> Option<$name> {
                let t = text.replace(['_', '-'], "").to_ascii_lowercase();
                $(if t == $text.replace(['_', '-'], "").to_ascii_lowercase() {
                    return Some($name::$variant);
                })*
                None
            }

            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

wire_enum!(
    /// Kafka's `ResourceType`. `Any` appears only in filters.
    ResourceType {
        Any = 1, "Any";
        Topic = 2, "Topic";
        Group = 3, "Group";
        Cluster = 4, "Cluster";
        TransactionalId = 5, "TransactionalId";
    }
);

wire_enum!(
    /// Kafka's `PatternType`. A stored binding is `Literal` or `Prefixed`; `Any` and `Match` only
    /// filter.
    PatternType {
        Any = 1, "Any";
        Match = 2, "Match";
        Literal = 3, "Literal";
        Prefixed = 4, "Prefixed";
    }
);

wire_enum!(
    /// Kafka's `AclOperation`. `Any` appears only in filters.
    Operation {
        Any = 1, "Any";
        All = 2, "All";
        Read = 3, "Read";
        Write = 4, "Write";
        Create = 5, "Create";
        Delete = 6, "Delete";
        Alter = 7, "Alter";
        Describe = 8, "Describe";
        ClusterAction = 9, "ClusterAction";
        DescribeConfigs = 10, "DescribeConfigs";
        AlterConfigs = 11, "AlterConfigs";
        IdempotentWrite = 12, "IdempotentWrite";
    }
);

wire_enum!(
    /// Kafka's `AclPermissionType`. `Any` appears only in filters.
    Permission {
        Any = 1, "Any";
        Deny = 2, "Deny";
        Allow = 3, "Allow";
    }
);

/// Kafka's wildcard: as a LITERAL resource name it matches every resource of its type; as a
/// host, every host.
pub const WILDCARD: &str = "*";
/// The principal that matches every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The one resource name of the Cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// What an ACL is about: a resource type and a LITERAL name (or `*`) or a PREFIXED name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    pub fn literal(resource_type: ResourceType, name: &str) -> ResourcePattern {
        ResourcePattern {
            resource_type,
            name: name.to_string(),
            pattern_type: PatternType::Literal,
        }
    }

    pub fn prefixed(resource_type: ResourceType, prefix: &str) -> ResourcePattern {
        ResourcePattern {
            resource_type,
            name: prefix.to_string(),
            pattern_type: PatternType::Prefixed,
        }
    }

    /// Whether this may be stored: a concrete type and pattern type, a non-empty name.
    pub fn is_concrete(&self) -> bool {
        !matches!(self.resource_type, ResourceType::Any)
            && matches!(self.pattern_type, PatternType::Literal | PatternType::Prefixed)
            && !self.name.is_empty()
    }

    /// Whether this pattern applies to the resource `name` of its type.
    pub fn covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.name == name || self.name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&self.name),
            PatternType::Any | PatternType::Match => false,
        }
    }
}

/// Who may (or may not) do what from where.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AccessControlEntry {
    /// `User:alice` or `User:*`.
    pub principal: String,
    /// A client address or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AccessControlEntry {
    /// Whether this may be stored: a concrete operation and permission, a `Type:name` principal,
    /// a host.
    pub fn is_concrete(&self) -> bool {
        !matches!(self.operation, Operation::Any)
            && !matches!(self.permission, Permission::Any)
            && self
                .principal
                .split_once(':')
                .is_some_and(|(t, n)| !t.is_empty() && !n.is_empty())
            && !self.host.is_empty()
    }

    fn matches_principal(&self, principal: &str) -> bool {
        self.principal == principal || self.principal == WILDCARD_PRINCIPAL
    }

    fn matches_host(&self, host: &str) -> bool {
        self.host == host || self.host == WILDCARD
    }
}

/// One ACL: a pattern and an entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

impl AclBinding {
    pub fn is_concrete(&self) -> bool {
        self.pattern.is_concrete() && self.entry.is_concrete()
    }
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} from {} on {}:{}:{}",
            self.entry.principal,
            self.entry.permission,
            self.entry.operation,
            self.entry.host,
            self.pattern.resource_type,
            self.pattern.pattern_type,
            self.pattern.name
        )
    }
}

/// DescribeAcls / DeleteAcls: which bindings a request means. `None` strings and `Any` codes
/// match everything; `Match` as pattern type matches every pattern that applies to `name`
/// (LITERAL equal, LITERAL `*`, PREFIXED prefixes of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    /// Matches every binding.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: ResourceType::Any,
            name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        }
    }

    pub fn matches(&self, b: &AclBinding) -> bool {
        let p = &b.pattern;
        let e = &b.entry;
        let type_ok = self.resource_type == ResourceType::Any || self.resource_type == p.resource_type;
        let pattern_ok = match self.pattern_type {
            PatternType::Any => self.name.as_ref().is_none_or(|n| *n == p.name),
            PatternType::Match => self.name.as_ref().is_none_or(|n| p.covers(n)),
            exact => exact == p.pattern_type && self.name.as_ref().is_none_or(|n| *n == p.name),
        };
        type_ok
            && pattern_ok
            && self.principal.as_ref().is_none_or(|x| *x == e.principal)
            && self.host.as_ref().is_none_or(|x| *x == e.host)
            && (self.operation == Operation::Any || self.operation == e.operation)
            && (self.permission == Permission::Any || self.permission == e.permission)
    }
}

/// Every ACL, by pattern (as the coordinator stores them: one znode per pattern).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclSet {
    by_pattern: BTreeMap<ResourcePattern, BTreeSet<AccessControlEntry>>,
}

impl AclSet {
    pub fn from_bindings(bindings: impl IntoIterator<Item = AclBinding>) -> AclSet {
        let mut set = AclSet::default();
        for b in bindings {
            set.add(b);
        }
        set
    }

    /// Adds a binding; returns whether it was new. Non-concrete bindings are a caller's error
    /// (handlers refuse them first) and are ignored.
    pub fn add(&mut self, b: AclBinding) -> bool {
        if !b.is_concrete() {
            return false;
        }
        self.by_pattern.entry(b.pattern).or_default().insert(b.entry)
    }

    /// Removes and returns every binding `filter` matches.
    pub fn remove_matching(&mut self, filter: &AclFilter) -> Vec<AclBinding> {
        let gone = self.matching(filter);
        for b in &gone {
            if let Some(entries) = self.by_pattern.get_mut(&b.pattern) {
                entries.remove(&b.entry);
                if entries.is_empty() {
                    self.by_pattern.remove(&b.pattern);
                }
            }
        }
        gone
    }

    pub fn matching(&self, filter: &AclFilter) -> Vec<AclBinding> {
        self.bindings().filter(|b| filter.matches(b)).collect()
    }

    pub fn bindings(&self) -> impl Iterator<Item = AclBinding> + '_ {
        self.by_pattern.iter().flat_map(|(p, entries)| {
            entries.iter().map(move |e| AclBinding {
                pattern: p.clone(),
                entry: e.clone(),
            })
        })
    }

    pub fn len(&self) -> usize {
        self.by_pattern.values().map(BTreeSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_pattern.is_empty()
    }

    /// The entries stored under one pattern (one znode's contents).
    pub fn entries(&self, pattern: &ResourcePattern) -> Option<&BTreeSet<AccessControlEntry>> {
        self.by_pattern.get(pattern)
    }

    /// Replaces the entries of one pattern (a znode re-read); an empty set removes it.
    pub fn set_entries(&mut self, pattern: ResourcePattern, entries: BTreeSet<AccessControlEntry>) {
        if entries.is_empty() || !pattern.is_concrete() {
            self.by_pattern.remove(&pattern);
        } else {
            self.by_pattern.insert(pattern, entries);
        }
    }

    pub fn patterns(&self) -> impl Iterator<Item = &ResourcePattern> {
        self.by_pattern.keys()
    }

    /// The entries that apply to the resource `name` of `resource_type` (rule 2).
    fn applying<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AccessControlEntry> {
        self.by_pattern
            .iter()
            .filter(move |(p, _)| p.resource_type == resource_type && p.covers(name))
            .flat_map(|(_, entries)| entries.iter())
    }
}

/// `authorizer.class.name`'s settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// `super.users`: principals (`User:admin`) allowed everything.
    pub super_users: BTreeSet<String>,
    /// `allow.everyone.if.no.acl.found`: a resource no ACL applies to is open to all.
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// `super.users` as Kafka writes it: principals separated by `;`.
    pub fn parse_super_users(text: &str) -> BTreeSet<String> {
        text.split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// Who asks, from where: the principal's `Type:name` and the client's address (no port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requester {
    pub principal: String,
    pub host: String,
}

impl Requester {
    /// From a connection's principal and its peer `host:port` (or a bare host).
    pub fn new(principal: &Principal, peer: &str) -> Requester {
        let host = match peer.rsplit_once(':') {
            // IPv6 peers are written `[::1]:port`; a bare IPv6 address has several colons.
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && (!h.contains(':') || h.starts_with('[')) => {
                h
            }
            _ => peer,
        };
        Requester {
            principal: principal.to_string(),
            host: host.trim_start_matches('[').trim_end_matches(']').to_string(),
        }
    }
}

/// Kafka's implied operations: the ALLOW entries that grant `op`.
fn granted_by(op: Operation) -> &'static [Operation] {
    use Operation::*;
    match op {
        Describe => &[Describe, Read, Write, Delete, Alter, All],
        DescribeConfigs => &[DescribeConfigs, AlterConfigs, All],
        Read => &[Read, All],
        Write => &[Write, All],
        Create => &[Create, All],
        Delete => &[Delete, All],
        Alter => &[Alter, All],
        ClusterAction => &[ClusterAction, All],
        AlterConfigs => &[AlterConfigs, All],
        IdempotentWrite => &[IdempotentWrite, All],
        All => &[All],
        Any => &[],
    }
}

/// The decision procedure over a configuration; the ACLs are passed in, so the same code decides
/// on a broker's cache and in tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Authorizer {
    pub config: AuthorizerConfig,
}

impl Authorizer {
    pub fn new(config: AuthorizerConfig) -> Authorizer {
        Authorizer { config }
    }

    /// Whether `who` may do `op` on the resource `name` of `resource_type` under `acls`.
    pub fn authorize(
        &self,
        acls: &AclSet,
        who: &Requester,
        op: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.config.super_users.contains(&who.principal) {
            return true;
        }
        if matches!(op, Operation::Any) || matches!(resource_type, ResourceType::Any) {
            return false;
        }
        let mut applying = acls.applying(resource_type, name).peekable();
        if applying.peek().is_none() {
            return self.config.allow_everyone_if_no_acl_found;
        }
        let mut allowed = false;
        for e in applying {
            if !e.matches_principal(&who.principal) || !e.matches_host(&who.host) {
                continue;
            }
            match e.permission {
                Permission::Deny if e.operation == op || e.operation == Operation::All => return false,
                Permission::Allow if granted_by(op).contains(&e.operation) => allowed = true,
                _ => {}
            }
        }
        allowed
    }

    /// Kafka's `authorizeByResourceType` (KIP-679), used by InitProducerId without a
    /// transactional id: whether `who` may do `op` on at least one resource of the type. True
    /// when an ALLOW grants it on some pattern that no DENY for the principal covers whole (a
    /// LITERAL `*` deny, or a PREFIXED deny whose prefix starts the allowed pattern's name).
    pub fn authorize_any(&self, acls: &AclSet, who: &Requester, op: Operation, resource_type: ResourceType) -> bool {
        if self.config.super_users.contains(&who.principal) {
            return true;
        }
        let of_type = || {
            acls.by_pattern
                .iter()
                .filter(move |(p, _)| p.resource_type == resource_type)
        };
        if self.config.allow_everyone_if_no_acl_found && of_type().next().is_none() {
            return true;
        }
        let matches = |e: &AccessControlEntry| e.matches_principal(&who.principal) && e.matches_host(&who.host);
        let denied_whole = |allowed: &ResourcePattern| {
            of_type().any(|(p, entries)| {
                let covers = match p.pattern_type {
                    PatternType::Literal => {
                        p.name == WILDCARD || (p.name == allowed.name && allowed.pattern_type == PatternType::Literal)
                    }
                    PatternType::Prefixed => allowed.name.starts_with(&p.name) && allowed.name != WILDCARD,
                    _ => false,
                };
                covers
                    && entries.iter().any(|e| {
                        matches(e)
                            && e.permission == Permission::Deny
                            && (e.operation == op || e.operation == Operation::All)
                    })
            })
        };
        of_type().any(|(p, entries)| {
            entries
                .iter()
                .any(|e| matches(e) && e.permission == Permission::Allow && granted_by(op).contains(&e.operation))
                && !denied_whole(p)
        })
    }
}

#[cfg(test)]
mod tests;
