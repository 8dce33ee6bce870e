//! The promises of the cloud seam ([`CloudProvider`]; STYLE.md, "The cloud seam") as one suite
//! that every provider passes: the in-memory `FakeProvider` (`tests/integration`, no rig), kwok on
//! the rig (`tests/integration`), aws against moto (`tests/aws`) and gcp against the project's
//! fake (`tests/gcp`).
//!
//! Each check is a function generic over the provider; [`run`] runs them all. A test builds a
//! [`Subject`] the way its own provider tests do (a ready node class, a claim builder) and calls
//! [`run`]. Launch candidates come from the catalogue through the controllers' own
//! `launch_candidates`, so the suite asks of a provider exactly what the launch controller will.

use karpenter_core::apis::{NodeClaim, labels};
use karpenter_core::cloud::{CloudError, CloudProvider, DeleteOutcome, Instance, ProviderId};
use karpenter_core::controllers::lifecycle::launch_candidates;
use karpenter_core::scheduling::{InstanceType, Requirements};
use std::time::{Duration, Instant};

/// A provider under test and what the suite needs to drive it.
pub struct Subject<'a, P> {
    /// The provider, its node class (the one the claims name) ready.
    pub provider: &'a P,
    /// A NodeClaim named as given, for the provider's node class, that at least two instance
    /// types of the catalogue fit (not stored anywhere: the suite passes it to `create`).
    pub claim: &'a dyn Fn(&str) -> NodeClaim,
    /// Tells the cloud that an instance type has no capacity, from now on, for the offerings
    /// the claims allow; `None` where the cloud cannot be told so (kwok), which skips
    /// [`an_offering_without_capacity_is_skipped_for_the_next_candidate_and_stays_listed`].
    pub exhaust: Option<&'a dyn Fn(&str)>,
    /// Prefixes the claims' names, so runs against one cloud do not meet.
    pub prefix: &'a str,
}

impl<P: CloudProvider> Subject<'_, P> {
    fn claim(&self, name: &str) -> NodeClaim {
        (self.claim)(&format!("{}-{name}", self.prefix))
    }

    /// The catalogue for the claim's node class and the candidates the launch controller would
    /// pass for it, cheapest first.
    async fn candidates(&self, claim: &NodeClaim) -> (Vec<InstanceType>, Vec<InstanceType>) {
        let catalogue = self
            .provider
            .instance_types(&claim.spec.node_class_ref)
            .await
            .unwrap_or_else(|e| panic!("{}: instance_types: {e:?}", self.provider.name()));
        let candidates = launch_candidates(claim, &catalogue).expect("launch candidates");
        (catalogue.to_vec(), candidates)
    }
}

/// Every check, in an order that leaves nothing running behind.
pub async fn run<P: CloudProvider>(subject: &Subject<'_, P>) {
    let instance =
        create_launches_one_of_the_candidates_as_an_offering_the_claim_allows(subject).await;
    get_finds_the_instance_by_its_provider_id_and_list_includes_it(subject, &instance).await;
    provider_ids_print_and_parse_back_and_the_provider_owns_them(subject, &instance);
    delete_is_terminating_then_gone_and_idempotent(subject, &instance).await;
    a_launch_without_candidates_is_refused_as_insufficient_capacity(subject).await;
    if subject.exhaust.is_some() {
        an_offering_without_capacity_is_skipped_for_the_next_candidate_and_stays_listed(subject)
            .await;
    }
}

/// `create` launches one of the candidates, as one of that type's offerings that the claim's
/// zone and capacity-type requirements allow, and says which claim it launched it for.
pub async fn create_launches_one_of_the_candidates_as_an_offering_the_claim_allows<
    P: CloudProvider,
>(
    subject: &Subject<'_, P>,
) -> Instance {
    let claim = subject.claim("create");
    let (_, candidates) = subject.candidates(&claim).await;
    assert!(!candidates.is_empty(), "the claim fits no instance type");
    let instance = subject
        .provider
        .create(&claim, &candidates)
        .await
        .unwrap_or_else(|e| panic!("{}: create: {e:?}", subject.provider.name()));
    assert_launched_from(&claim, &candidates, &instance);
    assert!(!instance.terminating, "a new instance is not terminating");
    instance
}

/// `get` finds a launched instance by its provider id; `list` includes it.
pub async fn get_finds_the_instance_by_its_provider_id_and_list_includes_it<P: CloudProvider>(
    subject: &Subject<'_, P>,
    instance: &Instance,
) {
    let got = subject
        .provider
        .get(&instance.provider_id)
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("get {} found nothing", instance.provider_id));
    assert_eq!(got.provider_id, instance.provider_id);
    assert_eq!(got.instance_type, instance.instance_type);
    assert_eq!(got.zone, instance.zone);
    let listed = subject.provider.list().await.expect("list");
    assert!(
        listed.iter().any(|i| i.provider_id == instance.provider_id),
        "list does not include {}: {:?}",
        instance.provider_id,
        listed
            .iter()
            .map(|i| i.provider_id.to_string())
            .collect::<Vec<_>>()
    );
}

/// A provider id prints as upstream spells it and parses back to itself, and the provider that
/// launched the machine owns it.
pub fn provider_ids_print_and_parse_back_and_the_provider_owns_them<P: CloudProvider>(
    subject: &Subject<'_, P>,
    instance: &Instance,
) {
    let text = instance.provider_id.to_string();
    assert_eq!(text.parse::<ProviderId>(), Ok(instance.provider_id.clone()));
    assert!(
        subject.provider.owns(&instance.provider_id),
        "{} does not own {text}",
        subject.provider.name()
    );
}

/// `delete` says `Terminating` for a running machine and `Gone` once it is gone, however often
/// it is asked; after it, `get` finds nothing (or a terminating machine) and `list` leaves it out
/// unless it is still terminating.
pub async fn delete_is_terminating_then_gone_and_idempotent<P: CloudProvider>(
    subject: &Subject<'_, P>,
    instance: &Instance,
) {
    let provider = subject.provider;
    let id = &instance.provider_id;
    assert_eq!(
        provider.delete(id).await.expect("delete"),
        DeleteOutcome::Terminating,
        "the first delete of a running machine"
    );
    // A cloud may take a moment to stop a machine: a later delete says Terminating until then.
    let start = Instant::now();
    loop {
        match provider.delete(id).await.expect("delete again") {
            DeleteOutcome::Gone => break,
            DeleteOutcome::Terminating => {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "{id} still terminating after a minute"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    assert_eq!(
        provider.delete(id).await.expect("delete once more"),
        DeleteOutcome::Gone,
        "delete is idempotent"
    );
    let after = provider.get(id).await.expect("get after delete");
    assert!(
        after.as_ref().is_none_or(|i| i.terminating),
        "get after delete: {after:?}"
    );
    let listed = provider.list().await.expect("list after delete");
    assert!(
        listed.iter().all(|i| i.provider_id != *id || i.terminating),
        "list after delete still has {id} running"
    );
}

/// A launch with no candidates is refused as insufficient capacity, as every cloud does when
/// nothing is left to try.
pub async fn a_launch_without_candidates_is_refused_as_insufficient_capacity<P: CloudProvider>(
    subject: &Subject<'_, P>,
) {
    let claim = subject.claim("none");
    let result = subject.provider.create(&claim, &[]).await;
    assert!(
        matches!(result, Err(CloudError::InsufficientCapacity { .. })),
        "create with no candidates: {result:?}"
    );
}

/// When the cheapest candidate has no capacity, the same `create` launches the next one; the
/// catalogue still lists the type, its offerings now unavailable (so explanations can say why),
/// and the next plan leaves it out.
pub async fn an_offering_without_capacity_is_skipped_for_the_next_candidate_and_stays_listed<
    P: CloudProvider,
>(
    subject: &Subject<'_, P>,
) {
    let Some(exhaust) = subject.exhaust else {
        return;
    };
    let claim = subject.claim("no-capacity");
    let (_, candidates) = subject.candidates(&claim).await;
    assert!(
        candidates.len() >= 2,
        "the claim must fit two types: {:?}",
        candidates.iter().map(|c| &c.name).collect::<Vec<_>>()
    );
    let first = candidates[0].name.clone();
    exhaust(&first);
    let instance = subject
        .provider
        .create(&claim, &candidates)
        .await
        .unwrap_or_else(|e| panic!("create with {first} out of capacity: {e:?}"));
    assert_ne!(instance.instance_type, first, "launched the exhausted type");
    assert_launched_from(&claim, &candidates, &instance);

    let (catalogue, next) = subject.candidates(&claim).await;
    let listed = catalogue
        .iter()
        .find(|it| it.name == first)
        .unwrap_or_else(|| panic!("{first} left the catalogue instead of being marked"));
    let requirements = requirements(&claim);
    assert!(
        !listed
            .offerings
            .iter()
            .any(|o| o.available && o.allowed_by(&requirements)),
        "{first}'s offerings are still available: {:?}",
        listed.offerings
    );
    assert!(
        listed.offerings.iter().any(|o| !o.available),
        "{first} is listed without its unavailable offerings"
    );
    assert_ne!(
        next.first().map(|c| c.name.as_str()),
        Some(first.as_str()),
        "the next plan still starts with {first}"
    );
    let outcome = subject
        .provider
        .delete(&instance.provider_id)
        .await
        .expect("delete");
    assert_eq!(outcome, DeleteOutcome::Terminating);
}

fn requirements(claim: &NodeClaim) -> Requirements {
    Requirements::from_api(&claim.spec.requirements).expect("the claim's requirements")
}

/// The instance is one of `candidates`, bought as an offering of that type that the claim allows,
/// and names the claim.
fn assert_launched_from(claim: &NodeClaim, candidates: &[InstanceType], instance: &Instance) {
    let launched = candidates
        .iter()
        .find(|c| c.name == instance.instance_type)
        .unwrap_or_else(|| {
            panic!(
                "launched {}, not a candidate: {:?}",
                instance.instance_type,
                candidates.iter().map(|c| &c.name).collect::<Vec<_>>()
            )
        });
    let requirements = requirements(claim);
    assert!(
        requirements.allows(labels::ZONE, &instance.zone)
            && requirements.allows(labels::CAPACITY_TYPE, instance.capacity_type.as_str()),
        "{} in {} is not allowed by the claim",
        instance.capacity_type,
        instance.zone
    );
    assert!(
        launched
            .offerings
            .iter()
            .any(|o| o.zone == instance.zone && o.capacity_type == instance.capacity_type),
        "{} has no {} offering in {}",
        launched.name,
        instance.capacity_type,
        instance.zone
    );
    assert_eq!(
        instance.node_claim.as_deref(),
        claim.metadata.name.as_deref(),
        "the instance names its claim"
    );
}
