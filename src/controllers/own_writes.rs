//! The lifecycle loop's memory of its own writes, so it does not act twice on a NodeClaim the
//! watch has not redelivered yet.

use crate::apis::NodeClaim;

/// The resourceVersion of each NodeClaim as it was read just before this agent wrote to it.
///
/// A Node or Pod event can reconcile a claim again before the watch has delivered the claim's
/// own update, and reconciling that stale copy would repeat the write (under load, several
/// times per claim). While the cache still shows the version read before a write, the claim
/// waits for the watch instead; an entry expires so a write that changed nothing (and so made
/// no new version) cannot stall a claim.
#[derive(Default)]
pub struct OwnWrites(
    std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
);

/// How long a write may go unobserved before the claim is reconciled from the cache anyway.
const OWN_WRITE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

impl OwnWrites {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (String, std::time::Instant)>>
    {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a write made to `claim` as it was read.
    pub fn wrote(&self, claim: &NodeClaim) {
        if let (Some(name), Some(version)) =
            (&claim.metadata.name, &claim.metadata.resource_version)
        {
            let mut writes = self.lock();
            // Expired entries go here too: a deleted claim is never looked up again.
            writes.retain(|_, (_, at)| at.elapsed() < OWN_WRITE_PATIENCE);
            writes.insert(name.clone(), (version.clone(), std::time::Instant::now()));
        }
    }

    /// Whether `claim` is the copy from before this agent's last write to it.
    pub fn is_stale(&self, claim: &NodeClaim) -> bool {
        let Some(name) = &claim.metadata.name else {
            return false;
        };
        let mut writes = self.lock();
        match writes.get(name) {
            Some((version, at))
                if claim.metadata.resource_version.as_ref() == Some(version)
                    && at.elapsed() < OWN_WRITE_PATIENCE =>
            {
                true
            }
            Some(_) => {
                writes.remove(name);
                false
            }
            None => false,
        }
    }
}
