//! Kafka's rack-unaware replica assignment (`AdminUtils.assignReplicasToBrokersRackUnaware`):
//! partition p's first replica is broker `(p + start_index) % n` of the sorted broker list, and
//! its followers follow at a shift that grows by one every `n` partitions, so leaders and
//! followers both spread evenly. The random start index and shift are arguments (the caller
//! draws them from its seeded stream), which keeps this a pure function.

use std::collections::BTreeMap;

use crate::ids::BrokerId;

/// Assigns `replication_factor` distinct replicas to each of `partitions` partitions.
/// `brokers` must be non-empty and `1 <= replication_factor <= brokers.len()` (the caller
/// checked, answering INVALID_REPLICATION_FACTOR otherwise).
pub fn assign_replicas(
    brokers: &[BrokerId],
    partitions: i32,
    replication_factor: usize,
    start_index: usize,
    replica_shift: usize,
) -> BTreeMap<i32, Vec<BrokerId>> {
    let mut sorted = brokers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let n = sorted.len();
    assert!(
        n > 0 && (1..=n).contains(&replication_factor),
        "assign_replicas: rf {replication_factor} over {n} brokers was not validated"
    );
    let start = start_index % n;
    let mut shift = replica_shift % n;
    let mut out = BTreeMap::new();
    for p in 0..partitions.max(0) {
        let pu = usize::try_from(p).expect("p is non-negative");
        if pu > 0 && pu % n == 0 {
            shift += 1;
        }
        let first = (pu + start) % n;
        let mut replicas = vec![sorted[first]];
        for j in 0..replication_factor - 1 {
            // n >= 2 here: rf - 1 >= 1 followers need a second broker.
            let step = 1 + (shift + j) % (n - 1);
            replicas.push(sorted[(first + step) % n]);
        }
        out.insert(p, replicas);
    }
    out
}
