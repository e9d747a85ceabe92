//! Where ACLs live in the coordinator's tree and how a znode holds them, after Kafka's
//! ZooKeeper layout:
//!
//! | path | data |
//! |---|---|
//! | `/kafka-acl/{Type}/{name}` | the entries of the LITERAL pattern (`*` included) |
//! | `/kafka-acl-extended/prefixed/{Type}/{name}` | the entries of the PREFIXED pattern |
//!
//! One znode per pattern, holding every entry of that pattern, one per line:
//! `{Allow|Deny} {Operation} {host} {principal}` (principal last: it may contain spaces).
//! Writers update a znode by compare-and-set on its version, so concurrent CreateAcls and
//! DeleteAcls on one pattern never lose each other's entries. Names are escaped (`%`, `/`, and
//! a name of `.` or `..`) to stay one path component. Decoding is total: bad bytes or paths give
//! `None`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::{AccessControlEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType};

pub const LITERAL_ROOT: &str = "/kafka-acl";
pub const PREFIXED_ROOT: &str = "/kafka-acl-extended/prefixed";

/// The resource types whose ACLs are stored.
pub const STORED_TYPES: [ResourceType; 4] = [
    ResourceType::Topic,
    ResourceType::Group,
    ResourceType::Cluster,
    ResourceType::TransactionalId,
];

/// Every persistent parent, parents first.
pub fn parent_paths() -> Vec<String> {
    let mut out = vec![
        LITERAL_ROOT.to_string(),
        "/kafka-acl-extended".into(),
        PREFIXED_ROOT.into(),
    ];
    for root in [LITERAL_ROOT, PREFIXED_ROOT] {
        for t in STORED_TYPES {
            out.push(type_path(root, t));
        }
    }
    out
}

pub fn type_path(root: &str, t: ResourceType) -> String {
    format!("{root}/{}", t.name())
}

pub fn root_of(pattern_type: PatternType) -> Option<&'static str> {
    match pattern_type {
        PatternType::Literal => Some(LITERAL_ROOT),
        PatternType::Prefixed => Some(PREFIXED_ROOT),
        PatternType::Any | PatternType::Match => None,
    }
}

/// The znode of a concrete pattern; `None` for a filter-only pattern.
pub fn pattern_path(p: &ResourcePattern) -> Option<String> {
    if !p.is_concrete() {
        return None;
    }
    let root = root_of(p.pattern_type)?;
    Some(format!("{}/{}", type_path(root, p.resource_type), escape(&p.name)))
}

/// The pattern of a child `child` under `root`/`t`.
pub fn pattern_of(root: &str, t: ResourceType, child: &str) -> Option<ResourcePattern> {
    let pattern_type = match root {
        LITERAL_ROOT => PatternType::Literal,
        PREFIXED_ROOT => PatternType::Prefixed,
        _ => return None,
    };
    let p = ResourcePattern {
        resource_type: t,
        name: unescape(child)?,
        pattern_type,
    };
    p.is_concrete().then_some(p)
}

pub fn escape(name: &str) -> String {
    if name == "." || name == ".." {
        return name.replace('.', "%2E");
    }
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            '\0' => out.push_str("%00"),
            c => out.push(c),
        }
    }
    out
}

pub fn unescape(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

pub fn encode_entries(entries: &BTreeSet<AccessControlEntry>) -> Vec<u8> {
    let mut s = String::new();
    for e in entries {
        let _ = writeln!(s, "{} {} {} {}", e.permission, e.operation, e.host, e.principal);
    }
    s.into_bytes()
}

pub fn decode_entries(bytes: &[u8]) -> Option<BTreeSet<AccessControlEntry>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut out = BTreeSet::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut parts = line.splitn(4, ' ');
        let permission = Permission::parse(parts.next()?)?;
        let operation = Operation::parse(parts.next()?)?;
        let host = parts.next()?.to_string();
        let principal = parts.next()?.to_string();
        let e = AccessControlEntry {
            principal,
            host,
            operation,
            permission,
        };
        if !e.is_concrete() {
            return None;
        }
        out.insert(e);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::tree::validate_path;

    #[test]
    fn paths_follow_kafkas_layout_and_names_stay_one_component() {
        let p = ResourcePattern::literal(ResourceType::Topic, "orders");
        assert_eq!(pattern_path(&p).as_deref(), Some("/kafka-acl/Topic/orders"));
        let p = ResourcePattern::prefixed(ResourceType::Group, "app/");
        assert_eq!(
            pattern_path(&p).as_deref(),
            Some("/kafka-acl-extended/prefixed/Group/app%2F")
        );
        for name in ["a/b", "%", "..", ".", "*", "x%2Fy", "ü"] {
            let p = ResourcePattern::literal(ResourceType::Group, name);
            let path = pattern_path(&p).expect("concrete");
            validate_path(&path).expect("a valid path");
            let child = path.rsplit('/').next().expect("child");
            assert_eq!(pattern_of(LITERAL_ROOT, ResourceType::Group, child), Some(p), "{name}");
        }
        for parent in parent_paths() {
            validate_path(&parent).expect("valid");
        }
        assert_eq!(pattern_of("/elsewhere", ResourceType::Topic, "t"), None);
        assert_eq!(unescape("%zz"), None);
        assert_eq!(unescape("%2"), None);
        assert_eq!(unescape("%ff"), None, "not UTF-8");
    }

    #[test]
    fn entries_round_trip_and_bad_bytes_are_refused() {
        let entries: BTreeSet<_> = [
            AccessControlEntry {
                principal: "User:alice smith".into(),
                host: "*".into(),
                operation: Operation::Read,
                permission: Permission::Allow,
            },
            AccessControlEntry {
                principal: "User:*".into(),
                host: "10.0.0.1".into(),
                operation: Operation::All,
                permission: Permission::Deny,
            },
        ]
        .into();
        assert_eq!(decode_entries(&encode_entries(&entries)), Some(entries));
        assert_eq!(decode_entries(b""), Some(BTreeSet::new()));
        for bad in [
            &b"Allow Read *"[..],
            b"Maybe Read * User:a",
            b"Allow Any * User:a",
            b"Allow Read * nocolon",
            b"\xff",
        ] {
            assert_eq!(decode_entries(bad), None, "{bad:?}");
        }
    }
}
