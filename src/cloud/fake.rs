//! A cloud that lives in memory, for tests in this crate and downstream: [`FakeProvider`].
//!
//! Follows upstream Karpenter's `pkg/cloudprovider/fake`: a catalogue the test sets, every call
//! recorded with its arguments for assertions, and errors injected per operation (for the next
//! call or for every call). Unlike upstream's, it keeps what it launched, so `get`, `list` and
//! `delete` answer as a real cloud would (a deleted machine is gone, deleting it again is `Gone`),
//! and it refuses what a real cloud refuses: a launch with no candidates, or with no offering the
//! claim allows, is insufficient capacity; a type it does not sell is never launched.
//!
//! Its machines carry `kwok://` provider ids (the seam has no scheme of its own for fakes), and it
//! owns exactly those.

use super::provider::{
    CloudError, CloudProvider, DeleteOutcome, Instance, ListedInstance, ProviderId,
};
use super::unavailable::{self, UnavailableOfferings};
use crate::apis::CapacityType;
use crate::apis::{NodeClaim, NodeClassReference, labels};
use crate::resources::{CPU, MEMORY, PODS, ResourceList};
use crate::scheduling::{InstanceType, Offering, Requirement, Requirements};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One operation of the seam, to inject failures into and to filter recorded calls by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    Create,
    Delete,
    Get,
    List,
    InstanceTypes,
    Drift,
}

/// A call the fake received, with its arguments.
#[derive(Clone, Debug)]
pub enum Call {
    /// `create`: the claim, and the candidates' names in the order given.
    Create {
        claim: Box<NodeClaim>,
        candidates: Vec<String>,
    },
    Delete {
        id: ProviderId,
    },
    Get {
        id: ProviderId,
    },
    List,
    InstanceTypes {
        node_class: NodeClassReference,
    },
    Drift {
        claim: Box<NodeClaim>,
    },
}

impl Call {
    /// The operation called.
    pub fn operation(&self) -> Operation {
        match self {
            Self::Create { .. } => Operation::Create,
            Self::Delete { .. } => Operation::Delete,
            Self::Get { .. } => Operation::Get,
            Self::List => Operation::List,
            Self::InstanceTypes { .. } => Operation::InstanceTypes,
            Self::Drift { .. } => Operation::Drift,
        }
    }
}

/// A failure to inject, one per [`CloudError`] kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// These offerings have no capacity (`capacity-type:instance-type:zone`, where any part may
    /// be `*`). A `create` skips them as the real providers do: each one it tries is marked
    /// unavailable (and reported so by `instance_types`) and the launch moves on to the next
    /// offering or candidate; with nothing left it fails naming what it tried. Any other
    /// operation fails with [`CloudError::InsufficientCapacity`] naming these offerings.
    InsufficientCapacity { offerings: Vec<String> },
    /// [`CloudError::NodeClassNotReady`], for the node class of the call when it has one.
    NodeClassNotReady { reason: String },
    /// [`CloudError::Throttled`].
    Throttled,
    /// [`CloudError::Api`] with this message.
    Api { message: String },
}

/// How long an injected failure lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// The next call of the operation only.
    Once,
    /// Every call, until [`FakeProvider::clear_failures`].
    Always,
}

/// The message of an injected failure, as the source of the [`CloudError`] it becomes.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InjectedFailure(pub String);

#[derive(Debug)]
struct Injected {
    operation: Operation,
    failure: Failure,
    times: Times,
}

#[derive(Debug, Default)]
struct State {
    catalogue: Arc<[InstanceType]>,
    /// What is running (or being stopped by the cloud), by id.
    instances: BTreeMap<ProviderId, Instance>,
    calls: Vec<Call>,
    failures: Vec<Injected>,
    /// Drift reasons by the claim's provider id.
    drift: BTreeMap<ProviderId, String>,
    launched: u64,
}

/// An in-memory [`CloudProvider`] that records every call. Cheap to build; one per test.
#[derive(Debug)]
pub struct FakeProvider {
    state: Mutex<State>,
    unavailable: UnavailableOfferings,
}

impl Default for FakeProvider {
    /// A fake selling [`catalogue`].
    fn default() -> Self {
        Self::new(catalogue())
    }
}

/// A small catalogue: `fake-small` (2 CPU, 4 GiB), `fake-medium` (4 CPU, 16 GiB) and
/// `fake-large` (8 CPU, 32 GiB), linux/amd64, on-demand and spot in `fake-zone-a` and
/// `fake-zone-b`; spot is cheaper, and zone b a little dearer than zone a.
pub fn catalogue() -> Vec<InstanceType> {
    [
        ("fake-small", 2, 4, 0.05),
        ("fake-medium", 4, 16, 0.12),
        ("fake-large", 8, 32, 0.24),
    ]
    .into_iter()
    .map(|(name, cpus, gib, price)| {
        let mut it = InstanceType::new(
            name,
            ResourceList::new()
                .with(CPU, cpus * 1000)
                .with(MEMORY, gib << 30)
                .with(PODS, 110),
        );
        it.requirements
            .add(Requirement::in_values(labels::ARCH, ["amd64"]));
        it.requirements
            .add(Requirement::in_values(labels::OS, ["linux"]));
        it.overhead.kube_reserved = ResourceList::new().with(CPU, 100).with(MEMORY, 256 << 20);
        it.offerings = vec![
            Offering::new("fake-zone-a", CapacityType::OnDemand, price),
            Offering::new("fake-zone-a", CapacityType::Spot, price * 0.4),
            Offering::new("fake-zone-b", CapacityType::OnDemand, price * 1.05),
            Offering::new("fake-zone-b", CapacityType::Spot, price * 0.42),
        ];
        it
    })
    .collect()
}

/// Whether `pattern` (`capacity-type:instance-type:zone`, parts may be `*`) names the offering.
fn matches(pattern: &str, capacity_type: CapacityType, instance_type: &str, zone: &str) -> bool {
    let mut parts = pattern.splitn(3, ':');
    [capacity_type.as_str(), instance_type, zone]
        .into_iter()
        .all(|value| parts.next().is_some_and(|p| p == "*" || p == value))
}

impl FakeProvider {
    /// A fake selling `catalogue` to every node class.
    pub fn new(catalogue: Vec<InstanceType>) -> Self {
        Self {
            state: Mutex::new(State {
                catalogue: catalogue.into(),
                ..State::default()
            }),
            unavailable: UnavailableOfferings::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock left consistent data: every change below
        // is one assignment or insertion.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces the catalogue (launched machines keep running).
    pub fn set_catalogue(&self, catalogue: Vec<InstanceType>) {
        self.state().catalogue = catalogue.into();
    }

    /// Makes `operation` fail with `failure`, for the next call or every call. Failures queue:
    /// a call meets the first one injected for its operation.
    pub fn fail(&self, operation: Operation, failure: Failure, times: Times) {
        self.state().failures.push(Injected {
            operation,
            failure,
            times,
        });
    }

    /// Forgets every injected failure (offerings already marked unavailable stay so).
    pub fn clear_failures(&self) {
        self.state().failures.clear();
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The calls of one operation, oldest first.
    pub fn calls_to(&self, operation: Operation) -> Vec<Call> {
        self.state()
            .calls
            .iter()
            .filter(|c| c.operation() == operation)
            .cloned()
            .collect()
    }

    /// Forgets the calls recorded so far.
    pub fn clear_calls(&self) {
        self.state().calls.clear();
    }

    /// What is running now, by id.
    pub fn instances(&self) -> Vec<Instance> {
        self.state().instances.values().cloned().collect()
    }

    /// Adds a machine launched some other way (an orphan for garbage collection, a machine from
    /// before a restart).
    pub fn insert_instance(&self, instance: Instance) {
        self.state()
            .instances
            .insert(instance.provider_id.clone(), instance);
    }

    /// The cloud starts stopping a machine on its own (spot interruption, preemption): `get` and
    /// `list` report it terminating. False when there is no such machine.
    pub fn interrupt(&self, id: &ProviderId) -> bool {
        self.state()
            .instances
            .get_mut(id)
            .map(|i| i.terminating = true)
            .is_some()
    }

    /// Makes `drift` report `reason` for the claim whose machine is `id` (`None`: not drifted).
    pub fn set_drift(&self, id: &ProviderId, reason: Option<String>) {
        let mut state = self.state();
        match reason {
            Some(reason) => state.drift.insert(id.clone(), reason),
            None => state.drift.remove(id),
        };
    }

    /// The offerings recently found without capacity, as the aws and gcp providers keep them.
    pub fn unavailable_offerings(&self) -> &UnavailableOfferings {
        &self.unavailable
    }

    /// Records `call` and returns the failure injected for it, if any. For a create, injected
    /// insufficient capacity is not a failure of the call: its offerings are returned, for the
    /// launch to skip (the ones injected once are used up by this call).
    fn record(&self, call: Call, node_class: Option<&str>) -> Result<Vec<String>, CloudError> {
        let operation = call.operation();
        let mut state = self.state();
        state.calls.push(call);
        let mut exhausted = Vec::new();
        let mut failed = None;
        let mut index = 0;
        while index < state.failures.len() {
            let injected = &state.failures[index];
            let no_capacity_for_a_launch = operation == Operation::Create
                && matches!(injected.failure, Failure::InsufficientCapacity { .. });
            // Every no-capacity injection shapes a launch; otherwise the first one found fails
            // the call and the rest wait for the next.
            let applies =
                injected.operation == operation && (no_capacity_for_a_launch || failed.is_none());
            if !applies {
                index += 1;
                continue;
            }
            let failure = injected.failure.clone();
            if injected.times == Times::Once {
                state.failures.remove(index);
            } else {
                index += 1;
            }
            match failure {
                Failure::InsufficientCapacity { offerings } if operation == Operation::Create => {
                    exhausted.extend(offerings);
                }
                other => failed = Some(other),
            }
        }
        match failed {
            None => Ok(exhausted),
            Some(Failure::InsufficientCapacity { offerings }) => {
                Err(CloudError::InsufficientCapacity { offerings })
            }
            Some(Failure::NodeClassNotReady { reason }) => Err(CloudError::NodeClassNotReady {
                name: node_class.unwrap_or_default().to_owned(),
                reason,
            }),
            Some(Failure::Throttled) => Err(CloudError::Throttled {
                source: Box::new(InjectedFailure("throttled (injected)".to_owned())),
            }),
            Some(Failure::Api { message }) => Err(CloudError::api(
                format!("{operation:?} (injected)"),
                InjectedFailure(message),
            )),
        }
    }

    /// The catalogue with the offerings found without capacity marked unavailable.
    fn current_catalogue(&self) -> Arc<[InstanceType]> {
        let catalogue = self.state().catalogue.clone();
        let unavailable = |it: &InstanceType, o: &Offering| {
            self.unavailable
                .is_unavailable(o.capacity_type, &it.name, &o.zone)
        };
        if !catalogue
            .iter()
            .any(|it| it.offerings.iter().any(|o| unavailable(it, o)))
        {
            return catalogue;
        }
        catalogue
            .iter()
            .map(|it| {
                let mut it = it.clone();
                let marked: Vec<bool> = it.offerings.iter().map(|o| unavailable(&it, o)).collect();
                for (offering, marked) in it.offerings.iter_mut().zip(marked) {
                    offering.available &= !marked;
                }
                it
            })
            .collect()
    }

    fn launch(
        &self,
        claim: &NodeClaim,
        instance_type: &InstanceType,
        offering: &Offering,
    ) -> Instance {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
        let mut node_labels = instance_type.fixed_labels();
        node_labels.extend(claim_labels.clone());
        node_labels.insert(labels::INSTANCE_TYPE.to_owned(), instance_type.name.clone());
        node_labels.insert(labels::ZONE.to_owned(), offering.zone.clone());
        node_labels.insert(
            labels::CAPACITY_TYPE.to_owned(),
            offering.capacity_type.to_string(),
        );
        let mut state = self.state();
        state.launched += 1;
        let instance = Instance {
            provider_id: ProviderId::Kwok {
                name: format!("fake-{}", state.launched),
            },
            node_claim: Some(claim_name),
            node_pool: claim_labels.get(labels::NODE_POOL).cloned(),
            instance_type: instance_type.name.clone(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type,
            image_id: None,
            capacity: instance_type.capacity.clone(),
            allocatable: instance_type.allocatable(),
            labels: node_labels,
            annotations: BTreeMap::new(),
            price: offering.known_price(),
            created: Some(k8s_openapi::jiff::Timestamp::now()),
            terminating: false,
        };
        state
            .instances
            .insert(instance.provider_id.clone(), instance.clone());
        instance
    }
}

impl CloudProvider for FakeProvider {
    fn name(&self) -> &'static str {
        "fake"
    }

    /// Tries the candidates in the order given, each one's offerings that the claim allows
    /// cheapest first, and launches the first with capacity. The cloud's own catalogue decides
    /// what a type costs and where it is sold: a candidate it does not sell is skipped.
    async fn create(
        &self,
        claim: &NodeClaim,
        candidates: &[InstanceType],
    ) -> Result<Instance, CloudError> {
        let node_class = claim.spec.node_class_ref.name.clone();
        let exhausted = self.record(
            Call::Create {
                claim: Box::new(claim.clone()),
                candidates: candidates.iter().map(|c| c.name.clone()).collect(),
            },
            Some(&node_class),
        )?;
        let requirements = Requirements::from_api(&claim.spec.requirements)
            .map_err(|e| CloudError::api("reading the NodeClaim's requirements", e))?;
        let catalogue = self.current_catalogue();
        let mut failed = Vec::new();
        for candidate in candidates {
            let Some(sold) = catalogue.iter().find(|it| it.name == candidate.name) else {
                continue;
            };
            if requirements.intersects(&sold.requirements).is_err() {
                continue;
            }
            let mut offerings: Vec<&Offering> = sold
                .offerings
                .iter()
                .filter(|o| o.available && o.allowed_by(&requirements))
                .collect();
            offerings.sort_by(|a, b| a.price.total_cmp(&b.price));
            for offering in offerings {
                let (ct, zone) = (offering.capacity_type, &offering.zone);
                if exhausted
                    .iter()
                    .any(|pattern| matches(pattern, ct, &sold.name, zone))
                {
                    self.unavailable.mark(ct, &sold.name, zone);
                    failed.push(unavailable::key(ct, &sold.name, zone));
                    continue;
                }
                return Ok(self.launch(claim, sold, offering));
            }
        }
        Err(CloudError::InsufficientCapacity {
            offerings: if failed.is_empty() {
                candidates.iter().map(|it| it.name.clone()).collect()
            } else {
                failed
            },
        })
    }

    async fn delete(&self, id: &ProviderId) -> Result<DeleteOutcome, CloudError> {
        self.record(Call::Delete { id: id.clone() }, None)?;
        Ok(match self.state().instances.remove(id) {
            Some(_) => DeleteOutcome::Terminating,
            None => DeleteOutcome::Gone,
        })
    }

    async fn get(&self, id: &ProviderId) -> Result<Option<Instance>, CloudError> {
        self.record(Call::Get { id: id.clone() }, None)?;
        Ok(self.state().instances.get(id).cloned())
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, CloudError> {
        self.record(Call::List, None)?;
        Ok(self
            .instances()
            .into_iter()
            .map(ListedInstance::from)
            .collect())
    }

    async fn instance_types(
        &self,
        node_class: &NodeClassReference,
    ) -> Result<Arc<[InstanceType]>, CloudError> {
        self.record(
            Call::InstanceTypes {
                node_class: node_class.clone(),
            },
            Some(&node_class.name),
        )?;
        Ok(self.current_catalogue())
    }

    fn owns(&self, id: &ProviderId) -> bool {
        matches!(id, ProviderId::Kwok { .. })
    }

    async fn drift(&self, claim: &NodeClaim) -> Result<Option<String>, CloudError> {
        let node_class = claim.spec.node_class_ref.name.clone();
        self.record(
            Call::Drift {
                claim: Box::new(claim.clone()),
            },
            Some(&node_class),
        )?;
        let id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|id| id.parse::<ProviderId>().ok());
        Ok(id.and_then(|id| self.state().drift.get(&id).cloned()))
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    /// A claim for node class `fake`, allowing `types` and, when given, only `zone`.
    fn claim(name: &str, types: &[&str], zone: Option<&str>) -> NodeClaim {
        let mut requirements = vec![
            serde_json::json!({"key": labels::INSTANCE_TYPE, "operator": "In", "values": types}),
        ];
        if let Some(zone) = zone {
            requirements
                .push(serde_json::json!({"key": labels::ZONE, "operator": "In", "values": [zone]}));
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {labels::NODE_POOL: "pool"}},
            "spec": {
                "requirements": requirements,
                "nodeClassRef": {"group": labels::KWOK_GROUP, "kind": "KWOKNodeClass", "name": "fake"},
            },
        }))
        .expect("claim")
    }

    fn types(names: &[&str]) -> Vec<InstanceType> {
        catalogue()
            .into_iter()
            .filter(|it| names.contains(&it.name.as_str()))
            .collect()
    }

    #[tokio::test]
    async fn a_launch_takes_the_cheapest_allowed_offering_of_the_first_candidate_and_is_recorded() {
        let fake = FakeProvider::default();
        let candidates = types(&["fake-small", "fake-medium"]);
        let claim = claim("a", &["fake-small", "fake-medium"], Some("fake-zone-b"));
        let instance = fake.create(&claim, &candidates).await.unwrap();
        assert_eq!(instance.instance_type, "fake-small");
        assert_eq!(instance.zone, "fake-zone-b", "the claim allows only zone b");
        assert_eq!(instance.capacity_type, CapacityType::Spot);
        assert_eq!(instance.node_claim.as_deref(), Some("a"));
        assert_eq!(instance.node_pool.as_deref(), Some("pool"));
        assert_eq!(instance.labels[labels::ZONE], "fake-zone-b");
        assert_eq!(instance.labels[labels::ARCH], "amd64");
        let calls = fake.calls_to(Operation::Create);
        let [Call::Create { claim, candidates }] = calls.as_slice() else {
            panic!("{calls:?}")
        };
        assert_eq!(claim.metadata.name.as_deref(), Some("a"));
        assert_eq!(candidates, &["fake-small", "fake-medium"]);
    }

    #[tokio::test]
    async fn a_launch_with_no_candidates_or_no_allowed_offering_is_refused_as_no_capacity() {
        let fake = FakeProvider::default();
        let err = fake
            .create(&claim("a", &["fake-small"], None), &[])
            .await
            .unwrap_err();
        assert!(
            matches!(err, CloudError::InsufficientCapacity { .. }),
            "{err}"
        );
        let err = fake
            .create(
                &claim("b", &["fake-small"], Some("nowhere")),
                &types(&["fake-small"]),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, CloudError::InsufficientCapacity { offerings } if offerings == &["fake-small"]),
            "{err:?}"
        );
        // A candidate the claim does not allow, and one the cloud does not sell, are never
        // launched.
        let mut unknown = types(&["fake-small"]);
        unknown[0].name = "not-sold".to_owned();
        let err = fake
            .create(&claim("c", &["fake-large", "not-sold"], None), &unknown)
            .await
            .unwrap_err();
        assert!(
            matches!(err, CloudError::InsufficientCapacity { .. }),
            "{err}"
        );
        let err = fake
            .create(&claim("d", &["fake-large"], None), &types(&["fake-small"]))
            .await
            .unwrap_err();
        assert!(
            matches!(err, CloudError::InsufficientCapacity { .. }),
            "{err}"
        );
        assert!(fake.instances().is_empty());
    }

    #[tokio::test]
    async fn an_offering_without_capacity_is_skipped_marked_unavailable_and_still_listed() {
        let fake = FakeProvider::default();
        fake.fail(
            Operation::Create,
            Failure::InsufficientCapacity {
                offerings: vec!["*:fake-small:*".to_owned()],
            },
            Times::Once,
        );
        let candidates = types(&["fake-small", "fake-medium"]);
        let instance = fake
            .create(
                &claim("a", &["fake-small", "fake-medium"], None),
                &candidates,
            )
            .await
            .unwrap();
        assert_eq!(instance.instance_type, "fake-medium");
        assert_eq!(
            fake.unavailable_offerings().keys(),
            [
                "on-demand:fake-small:fake-zone-a",
                "on-demand:fake-small:fake-zone-b",
                "spot:fake-small:fake-zone-a",
                "spot:fake-small:fake-zone-b",
            ]
        );
        let reference = claim("x", &[], None).spec.node_class_ref;
        let catalogue = fake.instance_types(&reference).await.unwrap();
        let small = catalogue.iter().find(|it| it.name == "fake-small").unwrap();
        assert!(small.offerings.iter().all(|o| !o.available));
        // The next launch sees the cache, not the injected failure (used up).
        let err = fake
            .create(&claim("b", &["fake-small"], None), &types(&["fake-small"]))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, CloudError::InsufficientCapacity { offerings } if offerings == &["fake-small"]),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn with_nothing_left_the_launch_names_the_offerings_it_tried() {
        let fake = FakeProvider::default();
        fake.fail(
            Operation::Create,
            Failure::InsufficientCapacity {
                offerings: vec!["*:*:fake-zone-a".to_owned()],
            },
            Times::Always,
        );
        let err = fake
            .create(
                &claim("a", &["fake-small", "fake-medium"], Some("fake-zone-a")),
                &types(&["fake-small", "fake-medium"]),
            )
            .await
            .unwrap_err();
        let CloudError::InsufficientCapacity { offerings } = err else {
            panic!("{err:?}")
        };
        assert_eq!(
            offerings,
            [
                "spot:fake-small:fake-zone-a",
                "on-demand:fake-small:fake-zone-a",
                "spot:fake-medium:fake-zone-a",
                "on-demand:fake-medium:fake-zone-a",
            ]
        );
        // Zone b still has capacity.
        let instance = fake
            .create(&claim("b", &["fake-small"], None), &types(&["fake-small"]))
            .await
            .unwrap();
        assert_eq!(instance.zone, "fake-zone-b");
    }

    #[tokio::test]
    async fn a_deleted_machine_is_gone_for_get_list_and_a_second_delete() {
        let fake = FakeProvider::default();
        let instance = fake
            .create(&claim("a", &["fake-small"], None), &types(&["fake-small"]))
            .await
            .unwrap();
        let id = instance.provider_id.clone();
        assert_eq!(fake.get(&id).await.unwrap(), Some(instance.clone()));
        assert_eq!(fake.list().await.unwrap(), [ListedInstance::from(instance)]);
        assert_eq!(fake.delete(&id).await.unwrap(), DeleteOutcome::Terminating);
        assert_eq!(fake.delete(&id).await.unwrap(), DeleteOutcome::Gone);
        assert_eq!(fake.get(&id).await.unwrap(), None);
        assert!(fake.list().await.unwrap().is_empty());
        let unknown = ProviderId::Kwok {
            name: "never".to_owned(),
        };
        assert_eq!(fake.delete(&unknown).await.unwrap(), DeleteOutcome::Gone);
        let deletes: Vec<ProviderId> = fake
            .calls_to(Operation::Delete)
            .into_iter()
            .filter_map(|c| match c {
                Call::Delete { id } => Some(id),
                _ => None,
            })
            .collect();
        assert_eq!(deletes, [id.clone(), id, unknown]);
    }

    #[tokio::test]
    async fn an_injected_failure_hits_the_next_call_or_every_call_as_the_matching_cloud_error() {
        let fake = FakeProvider::default();
        let reference = claim("x", &[], None).spec.node_class_ref;
        fake.fail(
            Operation::InstanceTypes,
            Failure::NodeClassNotReady {
                reason: "no subnets".to_owned(),
            },
            Times::Once,
        );
        let err = fake.instance_types(&reference).await.unwrap_err();
        assert!(
            matches!(&err, CloudError::NodeClassNotReady { name, reason } if name == "fake" && reason == "no subnets"),
            "{err:?}"
        );
        assert!(fake.instance_types(&reference).await.is_ok(), "once only");

        fake.fail(Operation::List, Failure::Throttled, Times::Always);
        for _ in 0..2 {
            let err = fake.list().await.unwrap_err();
            assert_eq!(err.kind(), "throttled");
        }
        fake.clear_failures();
        assert!(fake.list().await.is_ok());

        let id = ProviderId::Kwok {
            name: "x".to_owned(),
        };
        fake.fail(
            Operation::Get,
            Failure::Api {
                message: "boom".to_owned(),
            },
            Times::Once,
        );
        fake.fail(Operation::Get, Failure::Throttled, Times::Once);
        assert_eq!(fake.get(&id).await.unwrap_err().kind(), "api");
        assert_eq!(fake.get(&id).await.unwrap_err().kind(), "throttled");
        assert_eq!(fake.get(&id).await.unwrap(), None);
        assert_eq!(
            fake.calls_to(Operation::Get).len(),
            3,
            "failed calls are recorded"
        );
        assert!(
            fake.delete(&id).await.is_ok(),
            "other operations unaffected"
        );
    }

    #[tokio::test]
    async fn an_interrupted_machine_is_terminating_and_drift_says_what_the_test_set() {
        let fake = FakeProvider::default();
        let mut claim = claim("a", &["fake-small"], None);
        let instance = fake.create(&claim, &types(&["fake-small"])).await.unwrap();
        let id = instance.provider_id;
        assert!(fake.owns(&id));
        assert!(fake.interrupt(&id));
        assert!(fake.get(&id).await.unwrap().unwrap().terminating);

        claim.status = Some(Default::default());
        if let Some(status) = claim.status.as_mut() {
            status.provider_id = Some(id.to_string());
        }
        assert_eq!(fake.drift(&claim).await.unwrap(), None);
        fake.set_drift(&id, Some("image changed".to_owned()));
        assert_eq!(
            fake.drift(&claim).await.unwrap().as_deref(),
            Some("image changed")
        );
    }
}
