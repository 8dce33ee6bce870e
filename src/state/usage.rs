//! What each NodePool's claims add up to: the node count and summed capacity its limits are
//! checked against. The scheduler's input and the NodePool status both read it, so both see
//! the same usage.

use crate::apis::labels;
use crate::resources::ResourceList;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// Node count and summed capacity per pool, from the NodeClaims that exist.
pub(crate) fn usage_by_pool<'a>(
    claims: impl IntoIterator<Item = &'a crate::apis::NodeClaim>,
) -> BTreeMap<String, (i64, ResourceList)> {
    let mut usage: BTreeMap<String, (i64, ResourceList)> = BTreeMap::new();
    for claim in claims {
        let Some(pool) = claim.labels().get(labels::NODE_POOL) else {
            continue;
        };
        // Looked up before inserting: `entry` would take an owned copy of the name for every
        // claim, where a cluster has a handful of pools and thousands of claims.
        if !usage.contains_key(pool.as_str()) {
            usage.insert(pool.clone(), (0, ResourceList::default()));
        }
        let Some(entry) = usage.get_mut(pool.as_str()) else {
            continue;
        };
        entry.0 += 1;
        // Before launch the claim's requests stand in for the capacity it will have.
        let capacity = claim
            .status
            .as_ref()
            .filter(|s| !s.capacity.is_empty())
            .map(|s| ResourceList::from_quantities(&s.capacity))
            .unwrap_or_else(|| ResourceList::from_quantities(&claim.spec.resources.requests));
        if let Ok(capacity) = capacity {
            entry.1.accumulate(&capacity);
        }
    }
    usage
}
