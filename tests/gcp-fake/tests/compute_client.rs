//! The fake's Compute endpoints as the official Rust client sees them: the shapes parse, errors
//! map to the right codes, a failed operation finishes DONE with `error` (and the poller returns
//! `Ok`), names are unique, `requestId` is idempotent, lists honour label filters.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gcp_fake::FakeGcp;
use google_cloud_compute_v1::client::{Instances, ZoneOperations};
use google_cloud_compute_v1::model::Instance;
use google_cloud_gax::error::rpc::Code;
use google_cloud_lro::Poller;
use std::time::Duration;

async fn instances(fake: &FakeGcp) -> Instances {
    Instances::builder()
        .with_endpoint(fake.endpoint())
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .with_polling_backoff_policy(
            google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder::new()
                .with_initial_delay(Duration::from_millis(10))
                .with_maximum_delay(Duration::from_millis(50))
                .build()
                .expect("backoff"),
        )
        .build()
        .await
        .expect("client")
}

fn vm(name: &str, machine_type: &str, labels: &[(&str, &str)]) -> Instance {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "machineType": format!("zones/us-central1-a/machineTypes/{machine_type}"),
        "labels": labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<std::collections::BTreeMap<_, _>>(),
        "disks": [{"boot": true, "autoDelete": true, "initializeParams": {"sourceImage": "projects/cos-cloud/global/images/family/cos-stable", "diskSizeGb": "20"}}],
    }))
    .expect("instance")
}

#[tokio::test]
async fn inserts_poll_to_done_and_duplicates_and_bad_machine_types_are_refused_with_google_codes() {
    let fake = FakeGcp::start().await.expect("fake");
    fake.state().compute.seed_project("p");
    fake.state().compute.operation_polls = 2;
    let client = instances(&fake).await;

    let op = client
        .insert()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_body(vm("vm-1", "e2-standard-2", &[("a", "1")]))
        .poller()
        .until_done()
        .await
        .expect("insert");
    assert!(op.error.is_none());
    assert_eq!(op.status.as_ref().and_then(|s| s.name()), Some("DONE"));
    assert!(op.id.is_some(), "ids parse as uint64 strings");
    let got = client
        .get()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_instance("vm-1")
        .send()
        .await
        .expect("get");
    assert_eq!(got.status.as_ref().and_then(|s| s.name()), Some("RUNNING"));
    assert!(
        got.label_fingerprint.is_some(),
        "fingerprints parse as bytes"
    );
    assert_eq!(got.labels.get("a").map(String::as_str), Some("1"));

    let duplicate = client
        .insert()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_body(vm("vm-1", "e2-standard-2", &[]))
        .send()
        .await
        .expect_err("409");
    assert_eq!(duplicate.http_status_code(), Some(409));
    assert_eq!(
        duplicate.status().map(|s| s.code),
        Some(Code::AlreadyExists)
    );
    let bad_type = client
        .insert()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_body(vm("vm-2", "zz-none-1", &[]))
        .send()
        .await
        .expect_err("400");
    assert_eq!(
        bad_type.status().map(|s| s.code),
        Some(Code::InvalidArgument)
    );
    let bad_label = client
        .insert()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_body(vm("vm-3", "e2-standard-2", &[("Upper", "x")]))
        .send()
        .await
        .expect_err("400");
    assert_eq!(
        bad_label.status().map(|s| s.code),
        Some(Code::InvalidArgument)
    );
    let missing = client
        .get()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_instance("nope")
        .send()
        .await
        .expect_err("404");
    assert_eq!(missing.status().map(|s| s.code), Some(Code::NotFound));
}

#[tokio::test]
async fn a_stockout_is_a_done_operation_with_an_error_that_the_poller_returns_as_ok() {
    let fake = FakeGcp::start().await.expect("fake");
    fake.state().compute.seed_project("p");
    fake.state()
        .compute
        .stockout("us-central1-a", "e2-standard-2", true);
    let client = instances(&fake).await;
    let op = client
        .insert()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_body(vm("vm-1", "e2-standard-2", &[]))
        .poller()
        .until_done()
        .await
        .expect("Ok even though it failed");
    let errors = &op.error.as_ref().expect("error").errors;
    assert_eq!(
        errors[0].code.as_deref(),
        Some("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
    );
    assert_eq!(op.http_error_status_code, Some(503));
    assert!(
        fake.state()
            .compute
            .instance("p", "us-central1-a", "vm-1")
            .is_none(),
        "no VM"
    );
    // The same request id returns the same operation instead of a second insert.
    fake.state().compute.clear_faults();
    let first = client
        .insert()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_request_id("6f1c8a8e-0000-4000-8000-000000000001")
        .set_body(vm("vm-2", "e2-standard-2", &[]))
        .send()
        .await
        .expect("insert");
    let again = client
        .insert()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_request_id("6f1c8a8e-0000-4000-8000-000000000001")
        .set_body(vm("vm-2", "e2-standard-2", &[]))
        .send()
        .await
        .expect("idempotent");
    assert_eq!(first.name, again.name);
    // zoneOperations.get and wait know the operation; an unknown one is 404.
    let operations = ZoneOperations::builder()
        .with_endpoint(fake.endpoint())
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .build()
        .await
        .expect("client");
    let waited = operations
        .wait()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_operation(first.name.clone().unwrap())
        .send()
        .await
        .expect("wait");
    assert_eq!(waited.status.as_ref().and_then(|s| s.name()), Some("DONE"));
    let unknown = operations
        .get()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_operation("operation-0")
        .send()
        .await
        .expect_err("404");
    assert_eq!(unknown.status().map(|s| s.code), Some(Code::NotFound));
}

#[tokio::test]
async fn lists_filter_on_labels_and_aggregate_by_zone() {
    let fake = FakeGcp::start().await.expect("fake");
    fake.state().compute.seed_project("p");
    let client = instances(&fake).await;
    for (name, cluster) in [("vm-a", "one"), ("vm-b", "two")] {
        client
            .insert()
            .set_project("p")
            .set_zone("us-central1-a")
            .set_body(vm(name, "e2-standard-2", &[("cluster", cluster)]))
            .send()
            .await
            .expect("insert");
    }
    let listed = client
        .list()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_filter("labels.cluster = \"one\"")
        .send()
        .await
        .expect("list");
    assert_eq!(
        listed
            .items
            .iter()
            .map(|i| i.name.clone().unwrap())
            .collect::<Vec<_>>(),
        ["vm-a"]
    );
    let aggregated = client
        .aggregated_list()
        .set_project("p")
        .set_filter("(labels.cluster = two) AND (labels.cluster:*)")
        .send()
        .await
        .expect("aggregated");
    let in_a = &aggregated.items["zones/us-central1-a"].instances;
    assert_eq!(
        in_a.iter()
            .map(|i| i.name.clone().unwrap())
            .collect::<Vec<_>>(),
        ["vm-b"]
    );
    assert!(
        aggregated.items["zones/us-central1-b"].instances.is_empty(),
        "empty scopes carry a warning, no instances"
    );
    let deleted = client
        .delete()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_instance("vm-a")
        .poller()
        .until_done()
        .await
        .expect("delete");
    assert!(deleted.error.is_none());
    let again = client
        .delete()
        .set_project("p")
        .set_zone("us-central1-a")
        .set_instance("vm-a")
        .send()
        .await
        .expect_err("404");
    assert_eq!(again.status().map(|s| s.code), Some(Code::NotFound));
}
