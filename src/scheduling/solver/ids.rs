//! Typed indexes into the solver's tables, so that a requirement state can't be passed where a
//! pod's requirements are expected, or a bin where a pod is. Each is a `u32` (the tables never
//! come near 2³² rows), `Copy`, and hashes as the `u32` it wraps; [`Table`] is a `Vec` that
//! only its own kind of id indexes.

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// An index into one [`Table`].
pub(super) trait Id: Copy {
    /// The id of row `index`.
    fn new(index: usize) -> Self;
    /// The row it names.
    fn index(self) -> usize;
}

macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub(super) struct $name(u32);

        impl Id for $name {
            fn new(index: usize) -> Self {
                // A round has far fewer than 2³² pods, bins, states or groups.
                Self(index as u32)
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }
    )*};
}

ids! {
    /// A pending pod: its index in [`crate::scheduling::Input::pods`].
    PodId;
    /// A distinct pod description (the replicas of a Deployment share one).
    InfoId;
    /// A pod description at one relaxation level.
    ShapeId;
    /// An interned set of requirements.
    ReqId;
    /// A NodePool in the order this solve tries them (not its index in the input).
    PoolId;
    /// An instance type of one NodePool: its index in that pool's types.
    TypeId;
    /// A requirement state: a NodePool's requirements narrowed by some pods.
    StateId;
    /// A topology key other than the hostname.
    KeyId;
    /// A topology group (a spread constraint or pod (anti-)affinity term shared by pods).
    GroupId;
    /// Something a pod can be placed on: an existing node, an in-flight claim, or a claim of
    /// this round.
    BinId;
}

impl ReqId {
    /// The plain number stored in a [`crate::scheduling::topology::GroupKey`]'s filter.
    pub(super) fn raw(self) -> u32 {
        self.0
    }

    /// The id a group's filter names.
    pub(super) fn from_raw(raw: u32) -> Self {
        Self(raw)
    }
}

impl BinId {
    /// The plain number [`crate::scheduling::topology::Group`] counts hosts by.
    pub(super) fn raw(self) -> u32 {
        self.0
    }

    /// The bin a group's host count or eligible list names.
    pub(super) fn from_raw(raw: u32) -> Self {
        Self(raw)
    }
}

/// A `Vec` indexed by one kind of [`Id`].
pub(super) struct Table<I, T> {
    rows: Vec<T>,
    id: PhantomData<fn(I) -> I>,
}

impl<I: Id, T> Table<I, T> {
    pub(super) fn new() -> Self {
        Self {
            rows: Vec::new(),
            id: PhantomData,
        }
    }

    /// `len` rows, each `row`.
    pub(super) fn filled(len: usize, row: T) -> Self
    where
        T: Clone,
    {
        Self {
            rows: vec![row; len],
            id: PhantomData,
        }
    }

    /// Appends a row and returns its id.
    pub(super) fn push(&mut self, row: T) -> I {
        let id = I::new(self.rows.len());
        self.rows.push(row);
        id
    }

    /// The id the next pushed row will get.
    pub(super) fn next_id(&self) -> I {
        I::new(self.rows.len())
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Every id, in order.
    pub(super) fn ids(&self) -> impl Iterator<Item = I> + use<I, T> {
        (0..self.rows.len()).map(I::new)
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.rows.iter()
    }

    /// Every row with its id, in order.
    pub(super) fn enumerate(&self) -> impl Iterator<Item = (I, &T)> {
        self.rows.iter().enumerate().map(|(i, r)| (I::new(i), r))
    }
}

impl<I: Id, T> Default for Table<I, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: Id, T> FromIterator<T> for Table<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(rows: It) -> Self {
        Self {
            rows: rows.into_iter().collect(),
            id: PhantomData,
        }
    }
}

impl<'t, I, T> IntoIterator for &'t Table<I, T> {
    type Item = &'t T;
    type IntoIter = std::slice::Iter<'t, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.rows.iter()
    }
}

impl<'t, I, T> IntoIterator for &'t mut Table<I, T> {
    type Item = &'t mut T;
    type IntoIter = std::slice::IterMut<'t, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.rows.iter_mut()
    }
}

impl<I: Id, T> Index<I> for Table<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.rows[id.index()]
    }
}

impl<I: Id, T> IndexMut<I> for Table<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.rows[id.index()]
    }
}
