//! How AWS SDK errors become the provider's [`CloudError`]s: throttling codes mean "back off",
//! anything else is an API failure naming the action, with the service's code and message
//! kept in the text.

use crate::cloud::CloudError;
use aws_sdk_ec2::error::ProvideErrorMetadata;

/// The error code of an AWS SDK error, if the service sent one.
pub(crate) fn sdk_error_code<E: ProvideErrorMetadata>(error: &E) -> Option<&str> {
    error.code()
}

/// Codes that mean "slow down".
const THROTTLING_CODES: [&str; 5] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestThrottled",
];

/// Maps an SDK error onto the provider's errors: throttling, or an API failure naming `action`.
pub(crate) fn cloud_error<E>(action: &str, error: E) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    // The SDK's Display says only "service error"; keep the code and message in the chain.
    let detail = match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        // No answer from the service: a timeout, a refused connection, an unreadable reply.
        (None, _) => format!("{}", aws_sdk_ec2::error::DisplayErrorContext(&error)),
    };
    let throttled = error.code().is_some_and(|c| THROTTLING_CODES.contains(&c));
    let error = AwsApiError {
        detail,
        sdk: Box::new(error),
    };
    if throttled {
        return CloudError::Throttled {
            source: Box::new(error),
        };
    }
    CloudError::Api {
        action: action.to_owned(),
        source: Box::new(error),
    }
}

/// An AWS error with its code and message in the text. The SDK's own error is kept for the
/// debug output but is not its `source`: its text ("service error", "dispatch failure") would
/// only repeat less of the detail in a condition or Event that prints the chain.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub(crate) struct AwsApiError {
    detail: String,
    sdk: Box<dyn std::error::Error + Send + Sync>,
}
