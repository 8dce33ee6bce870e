//! Node lists in Kubernetes' protobuf encoding, decoded for the fields `status` reads.
//!
//! Why: the API server encodes a list of 1,000 Nodes as protobuf about three times faster than
//! as JSON (measured on the test rig: 40 ms against 140 ms, 2.7 MB against 7.3 MB), and `status`
//! spends its time waiting for exactly that list. Built-in kinds only: custom resources (the
//! NodeClaims) have no protobuf encoding.
//!
//! The wire format: the 4 bytes `k8s\0`, then a `runtime.Unknown` whose `raw` field holds the
//! `NodeList` message. Field numbers are those of `k8s.io/api/core/v1/generated.proto` and
//! `k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto`, which Kubernetes never renumbers.
//! Everything not read here (managedFields, images, nodeInfo...) is skipped without decoding.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use std::collections::BTreeMap;

/// The media type to ask for.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// One field of a message: its number and its payload.
enum Payload<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Walks the fields of one message.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn of(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    fn varint(&mut self) -> anyhow::Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some((&byte, rest)) = self.rest.split_first() else {
                bail!("truncated varint")
            };
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        bail!("varint longer than 10 bytes")
    }

    fn take(&mut self, len: usize) -> anyhow::Result<&'a [u8]> {
        if len > self.rest.len() {
            bail!("field of {len} bytes with {} left", self.rest.len());
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    /// The next field, or `None` at the end of the message.
    fn next_field(&mut self) -> anyhow::Result<Option<(u64, Payload<'a>)>> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let payload = match key & 7 {
            0 => Payload::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Payload::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).context("field length")?;
                Payload::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Payload::Fixed
            }
            wire => bail!("unsupported wire type {wire}"),
        };
        Ok(Some((key >> 3, payload)))
    }
}

fn string(bytes: &[u8]) -> anyhow::Result<String> {
    String::from_utf8(bytes.to_vec()).context("a string field is not UTF-8")
}

/// A `map<string, string>` entry.
fn map_entry(bytes: &[u8]) -> anyhow::Result<(String, String)> {
    let (mut key, mut value) = (String::new(), String::new());
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        match (number, payload) {
            (1, Payload::Bytes(b)) => key = string(b)?,
            (2, Payload::Bytes(b)) => value = string(b)?,
            _ => {}
        }
    }
    Ok((key, value))
}

fn time(bytes: &[u8]) -> anyhow::Result<Time> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        match (number, payload) {
            // int64/int32 travel as two's complement varints.
            #[allow(clippy::cast_possible_wrap)]
            (1, Payload::Varint(v)) => seconds = v as i64,
            #[allow(clippy::cast_possible_truncation)]
            (2, Payload::Varint(v)) => nanos = v as i32,
            _ => {}
        }
    }
    let at =
        k8s_openapi::jiff::Timestamp::new(seconds, nanos).context("a timestamp out of range")?;
    Ok(Time(at))
}

fn owner_reference(bytes: &[u8]) -> anyhow::Result<OwnerReference> {
    let mut owner = OwnerReference::default();
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        match (number, payload) {
            (1, Payload::Bytes(b)) => owner.kind = string(b)?,
            (3, Payload::Bytes(b)) => owner.name = string(b)?,
            (4, Payload::Bytes(b)) => owner.uid = string(b)?,
            (5, Payload::Bytes(b)) => owner.api_version = string(b)?,
            (6, Payload::Varint(v)) => owner.controller = Some(v != 0),
            (7, Payload::Varint(v)) => owner.block_owner_deletion = Some(v != 0),
            _ => {}
        }
    }
    Ok(owner)
}

fn object_meta(bytes: &[u8]) -> anyhow::Result<ObjectMeta> {
    let mut meta = ObjectMeta::default();
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        let Payload::Bytes(b) = payload else { continue };
        match number {
            1 => meta.name = Some(string(b)?),
            3 => meta.namespace = Some(string(b)?),
            5 => meta.uid = Some(string(b)?),
            6 => meta.resource_version = Some(string(b)?),
            8 => meta.creation_timestamp = Some(time(b)?),
            9 => meta.deletion_timestamp = Some(time(b)?),
            11 | 12 => {
                let (key, value) = map_entry(b)?;
                let map = if number == 11 {
                    &mut meta.labels
                } else {
                    &mut meta.annotations
                };
                map.get_or_insert_with(BTreeMap::new).insert(key, value);
            }
            13 => meta
                .owner_references
                .get_or_insert_with(Vec::new)
                .push(owner_reference(b)?),
            14 => meta
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(string(b)?),
            _ => {}
        }
    }
    Ok(meta)
}

fn node_spec(bytes: &[u8]) -> anyhow::Result<NodeSpec> {
    let mut spec = NodeSpec::default();
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        match (number, payload) {
            (3, Payload::Bytes(b)) => spec.provider_id = Some(string(b)?),
            (4, Payload::Varint(v)) => spec.unschedulable = Some(v != 0),
            _ => {}
        }
    }
    Ok(spec)
}

fn node_condition(bytes: &[u8]) -> anyhow::Result<NodeCondition> {
    let mut condition = NodeCondition::default();
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        let Payload::Bytes(b) = payload else { continue };
        match number {
            1 => condition.type_ = string(b)?,
            2 => condition.status = string(b)?,
            3 => condition.last_heartbeat_time = Some(time(b)?),
            4 => condition.last_transition_time = Some(time(b)?),
            5 => condition.reason = Some(string(b)?),
            6 => condition.message = Some(string(b)?),
            _ => {}
        }
    }
    Ok(condition)
}

/// One entry of a `map<string, Quantity>`: the resource and its quantity's text.
fn quantity_entry(bytes: &[u8]) -> anyhow::Result<(String, Quantity)> {
    let (mut key, mut value) = (String::new(), String::new());
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        match (number, payload) {
            (1, Payload::Bytes(b)) => key = string(b)?,
            // A Quantity message: its text is field 1.
            (2, Payload::Bytes(b)) => {
                let mut quantity = Fields::of(b);
                while let Some((number, payload)) = quantity.next_field()? {
                    if let (1, Payload::Bytes(text)) = (number, payload) {
                        value = string(text)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok((key, Quantity(value)))
}

fn node_status(bytes: &[u8]) -> anyhow::Result<NodeStatus> {
    let mut status = NodeStatus::default();
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        match (number, payload) {
            // `status nodes` sets pods' requests against it.
            (2, Payload::Bytes(b)) => {
                let (name, quantity) = quantity_entry(b)?;
                status
                    .allocatable
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name, quantity);
            }
            (4, Payload::Bytes(b)) => status
                .conditions
                .get_or_insert_with(Vec::new)
                .push(node_condition(b)?),
            _ => {}
        }
    }
    Ok(status)
}

fn node(bytes: &[u8]) -> anyhow::Result<Node> {
    let mut node = Node::default();
    let mut fields = Fields::of(bytes);
    while let Some((number, payload)) = fields.next_field()? {
        let Payload::Bytes(b) = payload else { continue };
        match number {
            1 => node.metadata = object_meta(b)?,
            2 => node.spec = Some(node_spec(b)?),
            3 => node.status = Some(node_status(b)?),
            _ => {}
        }
    }
    Ok(node)
}

/// The Nodes of a `NodeList` response body: name, namespace, uid, resourceVersion, labels,
/// annotations, timestamps, owners and finalizers; providerID and unschedulable; conditions.
pub(crate) fn decode_node_list(body: &[u8]) -> anyhow::Result<Vec<Node>> {
    let Some(envelope) = body.strip_prefix(MAGIC) else {
        bail!("not a Kubernetes protobuf body (no k8s\\0 prefix)")
    };
    let mut raw = None;
    let mut fields = Fields::of(envelope);
    while let Some((number, payload)) = fields.next_field()? {
        match (number, payload) {
            (2, Payload::Bytes(b)) => raw = Some(b),
            (3, Payload::Bytes(encoding)) if !encoding.is_empty() => {
                bail!(
                    "content encoding {:?} is not supported",
                    String::from_utf8_lossy(encoding)
                )
            }
            _ => {}
        }
    }
    let raw = raw.context("the protobuf envelope holds no object")?;
    let mut nodes = Vec::new();
    let mut list = Fields::of(raw);
    while let Some((number, payload)) = list.next_field()? {
        if let (2, Payload::Bytes(b)) = (number, payload) {
            nodes.push(node(b)?);
        }
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A minimal encoder, only to build test bodies.
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn bytes_field(number: u64, payload: &[u8], out: &mut Vec<u8>) {
        varint(number << 3 | 2, out);
        varint(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }
    fn varint_field(number: u64, value: u64, out: &mut Vec<u8>) {
        varint(number << 3, out);
        varint(value, out);
    }
    fn message(build: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        build(&mut out);
        out
    }

    fn node_bytes(name: &str, ready: &str) -> Vec<u8> {
        let created = message(|m| varint_field(1, 1_764_700_000, m));
        let label = message(|m| {
            bytes_field(1, b"karpenter.sh/nodepool", m);
            bytes_field(2, b"default", m);
        });
        let managed = message(|m| bytes_field(1, b"kwok", m));
        let meta = message(|m| {
            bytes_field(1, name.as_bytes(), m);
            bytes_field(6, b"42", m);
            bytes_field(8, &created, m);
            bytes_field(11, &label, m);
            bytes_field(14, b"karpenter.sh/termination", m);
            bytes_field(17, &managed, m);
        });
        let spec = message(|m| {
            bytes_field(3, format!("kwok://{name}").as_bytes(), m);
            varint_field(4, 1, m);
        });
        let condition = message(|m| {
            bytes_field(1, b"Ready", m);
            bytes_field(2, ready.as_bytes(), m);
            bytes_field(4, &created, m);
            bytes_field(5, b"KubeletReady", m);
        });
        let image = message(|m| bytes_field(1, b"registry.k8s.io/pause:3.10", m));
        let cpu = message(|m| {
            bytes_field(1, b"cpu", m);
            bytes_field(2, &message(|q| bytes_field(1, b"3920m", q)), m);
        });
        let status = message(|m| {
            bytes_field(2, &cpu, m);
            bytes_field(4, &condition, m);
            bytes_field(8, &image, m);
            // A fixed64 and a fixed32 field that no schema has, to show unknown fields are skipped.
            varint(99 << 3 | 1, m);
            m.extend_from_slice(&[0; 8]);
            varint(98 << 3 | 5, m);
            m.extend_from_slice(&[0; 4]);
        });
        message(|m| {
            bytes_field(1, &meta, m);
            bytes_field(2, &spec, m);
            bytes_field(3, &status, m);
        })
    }

    fn body(nodes: &[Vec<u8>]) -> Vec<u8> {
        let list = message(|m| {
            bytes_field(1, &message(|l| bytes_field(2, b"7", l)), m);
            for node in nodes {
                bytes_field(2, node, m);
            }
        });
        let type_meta = message(|m| {
            bytes_field(1, b"v1", m);
            bytes_field(2, b"NodeList", m);
        });
        let mut out = MAGIC.to_vec();
        bytes_field(1, &type_meta, &mut out);
        bytes_field(2, &list, &mut out);
        bytes_field(4, b"application/vnd.kubernetes.protobuf", &mut out);
        out
    }

    #[test]
    fn decodes_the_fields_status_reads_and_skips_the_rest() {
        let nodes =
            decode_node_list(&body(&[node_bytes("a", "True"), node_bytes("b", "False")])).unwrap();
        assert_eq!(nodes.len(), 2);
        let a = &nodes[0];
        assert_eq!(a.metadata.name.as_deref(), Some("a"));
        assert_eq!(a.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            a.metadata.labels.as_ref().unwrap()["karpenter.sh/nodepool"],
            "default"
        );
        assert_eq!(
            a.metadata.finalizers.as_deref(),
            Some(&["karpenter.sh/termination".to_owned()][..])
        );
        assert_eq!(
            a.metadata
                .creation_timestamp
                .as_ref()
                .unwrap()
                .0
                .as_second(),
            1_764_700_000
        );
        assert!(a.metadata.managed_fields.is_none());
        assert_eq!(
            a.status.as_ref().unwrap().allocatable.as_ref().unwrap()["cpu"],
            Quantity("3920m".to_owned())
        );
        let spec = a.spec.as_ref().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("kwok://a"));
        assert_eq!(spec.unschedulable, Some(true));
        let conditions = a.status.as_ref().unwrap().conditions.as_ref().unwrap();
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(conditions[0].reason.as_deref(), Some("KubeletReady"));
        assert!(a.status.as_ref().unwrap().images.is_none());
        assert_eq!(
            nodes[1]
                .status
                .as_ref()
                .unwrap()
                .conditions
                .as_ref()
                .unwrap()[0]
                .status,
            "False"
        );
    }

    #[test]
    fn an_empty_list_is_no_nodes() {
        assert!(decode_node_list(&body(&[])).unwrap().is_empty());
    }

    /// 2,000 cases unless `PROPTEST_CASES` says otherwise (the long run: a million,
    /// `PROPTEST_CASES=1000000 cargo test --release -p kubectl-karpenter protobuf`).
    fn fuzz_config() -> proptest::test_runner::Config {
        let mut config = proptest::test_runner::Config::default();
        if std::env::var_os("PROPTEST_CASES").is_none() {
            config.cases = 2_000;
        }
        config.failure_persistence = None;
        config
    }

    proptest::proptest! {
        #![proptest_config(fuzz_config())]

        #[test]
        fn any_bytes_after_the_magic_decode_or_are_refused_without_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        ) {
            let mut body = MAGIC.to_vec();
            body.extend_from_slice(&bytes);
            let _ = decode_node_list(&body);
        }

        #[test]
        fn a_node_list_with_bytes_changed_decodes_or_is_refused_without_a_panic(
            names in proptest::collection::vec("[a-z0-9.-]{1,20}", 1..4),
            changes in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 0..6),
            cut in proptest::option::of(proptest::prelude::any::<usize>()),
        ) {
            let nodes: Vec<Vec<u8>> = names.iter().map(|n| node_bytes(n, "True")).collect();
            let mut whole = body(&nodes);
            if changes.is_empty() && cut.is_none() {
                let decoded = decode_node_list(&whole).expect("an intact list decodes");
                let decoded: Vec<_> = decoded.iter().filter_map(|n| n.metadata.name.clone()).collect();
                proptest::prop_assert_eq!(decoded, names);
            }
            for (at, byte) in changes {
                let at = MAGIC.len() + at % (whole.len() - MAGIC.len());
                whole[at] = byte;
            }
            if let Some(cut) = cut {
                whole.truncate(cut % (whole.len() + 1));
            }
            let _ = decode_node_list(&whole);
        }
    }

    #[test]
    fn a_body_that_is_not_protobuf_or_is_cut_short_is_an_error_not_a_panic() {
        assert!(decode_node_list(b"{\"kind\":\"NodeList\"}").is_err());
        let whole = body(&[node_bytes("a", "True")]);
        for cut in [5, whole.len() / 2, whole.len() - 1] {
            assert!(
                decode_node_list(&whole[..cut]).is_err(),
                "cut at {cut} of {}",
                whole.len()
            );
        }
    }
}
