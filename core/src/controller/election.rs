//! Controller election through the coordinator, as a protocol the integrator drives (each step
//! here is a pure function producing the write or reading a result):
//!
//! 1. Every broker watches `/controller` and, when it is absent, sends [`claim`]: create the
//!    ephemeral `/controller` holding its id. One create wins; the others get NodeExists and keep
//!    watching. The node dies with the winner's session, which re-opens the race.
//! 2. The winner reads `/controller_epoch` (data and version; absent in a new cluster), and sends
//!    [`bump_epoch`]: a compare-and-set to epoch + 1 on the version it read (a create at epoch 1
//!    when absent). On success it builds its [`Controller`] with [`elected`]; on BadVersion or
//!    NodeExists another controller moved the epoch meanwhile: it resigns (deletes `/controller`
//!    if it still holds it) and goes back to 1.
//! 3. Every later write carries `Check(/controller_epoch, version it set)`, so the writes of a
//!    controller that was replaced (its session expired, a new one bumped the epoch) all fail.
//!    A controller that sees such a failure on the fence resigns.

use super::{Controller, ControllerConfig, CreateMode, Op, Write};
use crate::cluster::{CONTROLLER_EPOCH_PATH, CONTROLLER_PATH};
use crate::ids::BrokerId;

/// Step 1: the ephemeral claim on `/controller`.
pub fn claim(id: BrokerId) -> Write {
    Write {
        ops: vec![Op::Create {
            path: CONTROLLER_PATH.to_string(),
            data: id.0.to_string().into_bytes(),
            mode: CreateMode::Ephemeral,
        }],
        what: format!("broker {} claims the controller", id.0),
    }
}

/// Reads `/controller`'s data: the controller's broker id (`None` for bad bytes).
pub fn parse_controller(data: &[u8]) -> Option<BrokerId> {
    std::str::from_utf8(data).ok()?.trim().parse().ok().map(BrokerId)
}

/// Reads `/controller_epoch`'s data (`None` for bad bytes).
pub fn parse_epoch(data: &[u8]) -> Option<i32> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// Step 2: the epoch bump. `current` is `/controller_epoch` as read: `(epoch, version)`, or
/// `None` when the node is absent. Returns the write and the epoch it sets.
pub fn bump_epoch(current: Option<(i32, i32)>) -> (Write, i32) {
    match current {
        None => (
            Write {
                ops: vec![Op::Create {
                    path: CONTROLLER_EPOCH_PATH.to_string(),
                    data: b"1".to_vec(),
                    mode: CreateMode::Persistent,
                }],
                what: "controller epoch 1".to_string(),
            },
            1,
        ),
        Some((epoch, version)) => {
            let next = epoch.saturating_add(1);
            (
                Write {
                    ops: vec![Op::Set {
                        path: CONTROLLER_EPOCH_PATH.to_string(),
                        data: next.to_string().into_bytes(),
                        expected_version: Some(version),
                    }],
                    what: format!("controller epoch {epoch} -> {next}"),
                },
                next,
            )
        }
    }
}

/// After a successful [`bump_epoch`]: the controller, fenced on the version the bump produced
/// (0 for the create, read version + 1 for the set: the coordinator's versions count sets).
pub fn elected(id: BrokerId, current: Option<(i32, i32)>, config: ControllerConfig) -> Controller {
    match current {
        None => Controller::new(id, 1, 0, config),
        Some((epoch, version)) => Controller::new(id, epoch.saturating_add(1), version.saturating_add(1), config),
    }
}
