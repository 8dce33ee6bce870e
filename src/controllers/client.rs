//! The agent's Kubernetes client.
//!
//! kube's default client re-sends a request answered 429 (Too Many Requests) up to 15 times
//! with exponential backoff, which takes minutes. The Eviction API answers 429 when a
//! PodDisruptionBudget refuses an eviction: through such a client every refused eviction stalls
//! its drain (and the reconcile worker) for minutes instead of being reported and asked again on
//! the next pass, as upstream's eviction queue does (client-go retries a 429 only when the server
//! sends `Retry-After`, which a refused eviction does not). The agent's loops requeue every
//! failed call themselves, so the client does not retry at all.

use kube::{Client, Config};

/// A client for the agent's control loops: `config` without kube's automatic retries.
pub fn agent_client(mut config: Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Client::try_from(config)
}
