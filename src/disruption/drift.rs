//! Drift: whether a NodeClaim no longer matches what its NodePool would launch now.
