//! A node's labels as the agent keeps them: sorted pairs of shared strings.
//!
//! A `BTreeMap<String, String>` of a Node's 21 labels is ~3 KB: the map's nodes (544 bytes each
//! for 11 entries) and two allocations a label. Nodes of a pool repeat the same keys and most
//! values, so a [`LabelSet`] built through an [`Interner`] holds 32 bytes a label and the text
//! once for the whole cluster. Lookups are a binary search over ~20 sorted keys.

use crate::interner::Interner;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Labels, sorted by key, each key once.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LabelSet(Box<[(Arc<str>, Arc<str>)]>);

impl LabelSet {
    /// The labels of `map`, their strings shared through `interner`.
    pub(crate) fn interned<'m>(
        map: impl IntoIterator<Item = (&'m String, &'m String)>,
        interner: &mut Interner,
    ) -> Self {
        // A BTreeMap iterates sorted with unique keys, which is what `get` relies on.
        Self(
            map.into_iter()
                .map(|(key, value)| (interner.get(key), interner.get(value)))
                .collect(),
        )
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// Whether `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Every label, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// How many labels there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&BTreeMap<String, String>> for LabelSet {
    fn from(map: &BTreeMap<String, String>) -> Self {
        Self::interned(map, &mut Interner::default())
    }
}

impl From<BTreeMap<String, String>> for LabelSet {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self::from(&map)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for LabelSet {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: BTreeMap<String, String> = iter
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Self::from(&map)
    }
}

impl fmt::Debug for LabelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_found_by_its_key_and_an_absent_one_is_not() {
        let labels: LabelSet = [
            ("topology.kubernetes.io/zone", "us-west-2a"),
            ("karpenter.sh/nodepool", "default"),
            ("kubernetes.io/arch", "arm64"),
        ]
        .into_iter()
        .collect();
        assert_eq!(labels.get("karpenter.sh/nodepool"), Some("default"));
        assert_eq!(
            labels.get("topology.kubernetes.io/zone"),
            Some("us-west-2a")
        );
        assert_eq!(labels.get("kubernetes.io/os"), None);
        let keys: Vec<&str> = labels.iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "karpenter.sh/nodepool",
                "kubernetes.io/arch",
                "topology.kubernetes.io/zone"
            ]
        );
    }

    #[test]
    fn nodes_of_one_pool_share_their_label_text() {
        let mut interner = Interner::default();
        let node = |host: &str| {
            BTreeMap::from([
                ("kubernetes.io/hostname".to_owned(), host.to_owned()),
                ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
            ])
        };
        let (a, b) = (
            LabelSet::interned(&node("a"), &mut interner),
            LabelSet::interned(&node("b"), &mut interner),
        );
        assert!(
            Arc::ptr_eq(&a.0[0].1, &b.0[0].1),
            "the pool's name is held once"
        );
        assert_eq!(a.get("kubernetes.io/hostname"), Some("a"));
        assert_eq!(b.get("kubernetes.io/hostname"), Some("b"));
        // Two keys, the pool, and the two hostnames.
        assert_eq!(interner.len(), 5);
    }
}
