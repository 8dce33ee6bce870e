//! Integration tests of the core library against a real control plane (see `tests/support/rig.rs`).
//! One binary, one rig: every module here shares it.

#[path = "../support/rig.rs"]
mod rig;

mod api_examples;
mod api_validation;
