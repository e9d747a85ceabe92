//! DescribeAcls, CreateAcls and DeleteAcls against an ACL set: wire codes judged (an unknown or
//! filter-only code in a creation is INVALID_REQUEST for that creation), the Cluster operation
//! checked (Describe for DescribeAcls, Alter for the others; CLUSTER_AUTHORIZATION_FAILED), and
//! SECURITY_DISABLED when the node has no authorizer, as Kafka answers.
//!
//! These functions change the set they are given; where that set lives (a single node's memory,
//! or the coordinator, written by CAS and read back through watches) is the caller's business.

use std::collections::BTreeMap;

use crate::error_code::ErrorCode;
use crate::protocol::api::create_acls::{AclCreation, AclCreationResult, CreateAclsRequest, CreateAclsResponse};
use crate::protocol::api::delete_acls::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsRequest, DeleteAclsResponse,
};
use crate::protocol::api::describe_acls::{
    AclDescription, AclFilterWire, DescribeAclsRequest, DescribeAclsResource, DescribeAclsResponse,
};
use crate::security::acl::{
    AccessControlEntry, AclBinding, AclFilter, AclSet, Operation, PatternType, Permission, ResourcePattern,
    ResourceType,
};

/// A creation as a storable binding, or why not.
pub fn binding_of(c: &AclCreation) -> Result<AclBinding, &'static str> {
    let resource_type = ResourceType::from_code(c.resource_type).ok_or("unknown resource type")?;
    let pattern_type = PatternType::from_code(c.pattern_type).ok_or("unknown pattern type")?;
    let operation = Operation::from_code(c.operation).ok_or("unknown operation")?;
    let permission = Permission::from_code(c.permission_type).ok_or("unknown permission type")?;
    let b = AclBinding {
        pattern: ResourcePattern {
            resource_type,
            name: c.resource_name.clone(),
            pattern_type,
        },
        entry: AccessControlEntry {
            principal: c.principal.clone(),
            host: c.host.clone(),
            operation,
            permission,
        },
    };
    if !b.is_concrete() {
        return Err("a binding needs a concrete resource type, pattern, operation, permission and principal");
    }
    if resource_type == ResourceType::Cluster && b.pattern.name != crate::security::acl::CLUSTER_NAME {
        return Err("the cluster resource is named kafka-cluster");
    }
    Ok(b)
}

/// A filter from the wire, or `None` for a code Kafka does not define.
pub fn filter_of(f: &AclFilterWire) -> Option<AclFilter> {
    Some(AclFilter {
        resource_type: ResourceType::from_code(f.resource_type)?,
        name: f.resource_name.clone(),
        pattern_type: PatternType::from_code(f.pattern_type)?,
        principal: f.principal.clone(),
        host: f.host.clone(),
        operation: Operation::from_code(f.operation)?,
        permission: Permission::from_code(f.permission_type)?,
    })
}

/// Whether the request may go on: `Err` is the error every part of the answer carries.
pub fn admission(authorizer_on: bool, cluster_op_allowed: bool) -> Result<(), ErrorCode> {
    if !authorizer_on {
        Err(ErrorCode::SecurityDisabled)
    } else if !cluster_op_allowed {
        Err(ErrorCode::ClusterAuthorizationFailed)
    } else {
        Ok(())
    }
}

pub fn describe_acls(
    acls: &AclSet,
    req: &DescribeAclsRequest,
    admitted: Result<(), ErrorCode>,
) -> DescribeAclsResponse {
    let refuse = |code: ErrorCode, why: &str| DescribeAclsResponse {
        error_code: code.code(),
        error_message: Some(why.to_string()),
        ..DescribeAclsResponse::default()
    };
    if let Err(code) = admitted {
        return refuse(code, "not allowed to describe ACLs");
    }
    let Some(filter) = filter_of(&req.filter) else {
        return refuse(ErrorCode::InvalidRequest, "unknown code in the filter");
    };
    let mut by_pattern: BTreeMap<ResourcePattern, Vec<AclDescription>> = BTreeMap::new();
    for b in acls.matching(&filter) {
        by_pattern.entry(b.pattern).or_default().push(AclDescription {
            principal: b.entry.principal,
            host: b.entry.host,
            operation: b.entry.operation.code(),
            permission_type: b.entry.permission.code(),
        });
    }
    DescribeAclsResponse {
        resources: by_pattern
            .into_iter()
            .map(|(p, acls)| DescribeAclsResource {
                resource_type: p.resource_type.code(),
                resource_name: p.name,
                pattern_type: p.pattern_type.code(),
                acls,
            })
            .collect(),
        ..DescribeAclsResponse::default()
    }
}

/// Adds each valid creation to `acls`; one result per creation, in order.
pub fn create_acls(acls: &mut AclSet, req: &CreateAclsRequest, admitted: Result<(), ErrorCode>) -> CreateAclsResponse {
    let results = req
        .creations
        .iter()
        .map(|c| {
            match admitted
                .map_err(|e| (e, "not allowed to create ACLs"))
                .and_then(|()| binding_of(c).map_err(|why| (ErrorCode::InvalidRequest, why)))
            {
                Ok(b) => {
                    acls.add(b);
                    AclCreationResult::default()
                }
                Err((code, why)) => AclCreationResult {
                    error_code: code.code(),
                    error_message: Some(why.to_string()),
                },
            }
        })
        .collect();
    CreateAclsResponse {
        throttle_time_ms: 0,
        results,
    }
}

/// Removes what each filter matches; one result per filter, listing the removed bindings.
pub fn delete_acls(acls: &mut AclSet, req: &DeleteAclsRequest, admitted: Result<(), ErrorCode>) -> DeleteAclsResponse {
    let filter_results = req
        .filters
        .iter()
        .map(|f| {
            let refused = |code: ErrorCode, why: &str| DeleteAclsFilterResult {
                error_code: code.code(),
                error_message: Some(why.to_string()),
                matching_acls: Vec::new(),
            };
            if let Err(code) = admitted {
                return refused(code, "not allowed to delete ACLs");
            }
            let Some(filter) = filter_of(f) else {
                return refused(ErrorCode::InvalidRequest, "unknown code in the filter");
            };
            DeleteAclsFilterResult {
                error_code: 0,
                error_message: None,
                matching_acls: acls.remove_matching(&filter).into_iter().map(matching_acl).collect(),
            }
        })
        .collect();
    DeleteAclsResponse {
        throttle_time_ms: 0,
        filter_results,
    }
}

/// A removed binding as DeleteAcls reports it.
pub fn matching_acl(b: AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl {
        error_code: 0,
        error_message: None,
        resource_type: b.pattern.resource_type.code(),
        resource_name: b.pattern.name,
        pattern_type: b.pattern.pattern_type.code(),
        principal: b.entry.principal,
        host: b.entry.host,
        operation: b.entry.operation.code(),
        permission_type: b.entry.permission.code(),
    }
}
