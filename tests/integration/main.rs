//! Integration tests of the core library against a real control plane (see `karpenter_test_support::rig`).
//! One binary, one rig: every module here shares it.

use karpenter_test_support::rig;

mod api_examples;
mod api_validation;
mod cloud_contract;
