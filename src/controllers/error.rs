//! The one error type of the control loops: what failed (an API call, a cloud call, a malformed
//! object, a watch that is behind) and a short kind for metric labels.

/// Why a control loop iteration failed. Every variant is retried; none stops the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action} failed")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// A cloud call failed.
    #[error("{action} failed")]
    Cloud {
        action: String,
        #[source]
        source: crate::cloud::CloudError,
    },
    /// An object the loop needs is malformed.
    #[error("{object} is invalid: {reason}")]
    Invalid { object: String, reason: String },
    /// A watch has not caught up with the API server yet.
    #[error("the {0} watch is behind the API server")]
    NotSynced(&'static str),
}

impl Error {
    pub(crate) fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Kube { action, source }
    }

    pub(crate) fn cloud(
        action: impl Into<String>,
    ) -> impl FnOnce(crate::cloud::CloudError) -> Self {
        let action = action.into();
        move |source| Self::Cloud { action, source }
    }

    /// Whether the failure was an optimistic-concurrency conflict (HTTP 409).
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube { source: kube::Error::Api(status), .. } if status.code == 409)
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "kube",
            Self::Cloud { source, .. } => source.kind(),
            Self::Invalid { .. } => "invalid",
            Self::NotSynced(_) => "not_synced",
        }
    }
}

/// Whether an API error means the object does not exist.
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}
