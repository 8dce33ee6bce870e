//! CreateFleet's idempotency token for each claim's launch.
//!
//! EC2 answers a repeated token with the first answer: the same parameters replay it, other
//! parameters are refused with `IdempotentParameterMismatch`. The claim's UID as the token makes
//! a launch retried after a timeout or a restart return the instance already launched rather
//! than a second one. But a fleet that was answered and launched nothing (an error only a new
//! request can get past: a launch template fixed meanwhile, a capacity error on every override)
//! would be replayed for ever under the same token, so after such an answer the claim's next
//! attempt uses a new token (`<uid>-<n>`). Only an answered request moves the token on: after a
//! timeout or a connection error the first request may still have launched, and only its token
//! finds that instance.
//!
//! The count lives in memory. After a restart the claim starts from its UID again: an old token
//! that launched nothing replays its failure and moves the token on; one that launched replays
//! the instance, so nothing is launched twice.

use std::collections::HashMap;
use std::sync::Mutex;

/// More claims than this with a moved token means many launches failed; the counts are dropped
/// rather than kept for claims long gone (a claim that still fails moves on again).
const FORGET_ABOVE: usize = 4096;

/// How many answered attempts launched nothing, by claim UID.
#[derive(Debug, Default)]
pub(super) struct ClientTokens {
    attempts: Mutex<HashMap<String, u32>>,
}

impl ClientTokens {
    fn attempts(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // A panic while holding the lock left only counters behind, which stay usable.
        self.attempts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The token for the claim's next CreateFleet (at most 41 of EC2's 64 characters).
    pub(super) fn token(&self, claim_uid: &str) -> String {
        match self.attempts().get(claim_uid) {
            None | Some(0) => claim_uid.to_owned(),
            Some(n) => format!("{claim_uid}-{n}"),
        }
    }

    /// CreateFleet answered and launched nothing: that token is spent.
    pub(super) fn launched_nothing(&self, claim_uid: &str) {
        let mut attempts = self.attempts();
        if attempts.len() >= FORGET_ABOVE && !attempts.contains_key(claim_uid) {
            attempts.clear();
        }
        *attempts.entry(claim_uid.to_owned()).or_default() += 1;
    }

    /// The claim launched: its count is no longer needed.
    pub(super) fn launched(&self, claim_uid: &str) {
        self.attempts().remove(claim_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_token_is_its_uid_until_an_answered_attempt_launches_nothing() {
        let tokens = ClientTokens::default();
        let uid = "0b5b2c1e-4f7a-4a8e-9d51-1f0c2b3a4d5e";
        assert_eq!(tokens.token(uid), uid);
        tokens.launched_nothing(uid);
        assert_eq!(tokens.token(uid), format!("{uid}-1"));
        tokens.launched_nothing(uid);
        assert_eq!(tokens.token(uid), format!("{uid}-2"));
        assert!(
            tokens.token(uid).len() <= 64,
            "EC2 takes at most 64 characters"
        );
        tokens.launched(uid);
        assert_eq!(tokens.token(uid), uid);
    }
}
