//! Events that a loop re-evaluates on every pass (a drain that is still waiting, a deadline that
//! still stands), published once per state instead of once per pass.
//!
//! kube's [`Recorder`] folds repeats of an Event into one series only by type, action, reason
//! and object: the note is not part of its key, so a new note ("2 pods are waiting" after "3
//! pods are waiting") would be patched into the old Event with the old text, and every repeat is
//! still an API write. Client-go keys its series on the note too, and upstream Karpenter drops
//! repeats of the same Event within two minutes (`pkg/events/recorder.go`). [`Notices`] does
//! both: a new note is a new Event; the same note again is dropped for two minutes, then counted
//! into its Event's series as a reminder (Events expire after an hour; a drain can take longer).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::warn;

/// The API server refuses an Event whose note is longer than this many bytes
/// (`events.k8s.io/v1` validation's `NoteLengthLimit`).
const NOTE_LIMIT: usize = 1024;

/// `event` with its note cut to [`NOTE_LIMIT`] (on a character boundary, the cut marked with an
/// ellipsis): a cloud's or the API server's error message can be longer, and the whole Event
/// would be refused.
fn within_limit(event: &Event) -> Event {
    Event {
        type_: event.type_,
        reason: event.reason.clone(),
        note: event.note.as_deref().map(fit),
        action: event.action.clone(),
        secondary: event.secondary.clone(),
    }
}

fn fit(note: &str) -> String {
    if note.len() <= NOTE_LIMIT {
        return note.to_owned();
    }
    let ellipsis = '…';
    let cut = (0..=NOTE_LIMIT - ellipsis.len_utf8())
        .rev()
        .find(|&i| note.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}{ellipsis}", &note[..cut])
}

/// How long the same notice is not repeated: upstream's event dedupe timeout.
const REPEAT_AFTER: Duration = Duration::from_secs(120);

/// How long a notice that was not repeated is remembered (longer than [`REPEAT_AFTER`], so a
/// reminder joins its Event's series; the Recorder itself keeps a series for six minutes).
const FORGET_AFTER: Duration = Duration::from_secs(300);

/// How often forgotten notices are dropped.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Which notice: the object it is about, the reason, and what tells one state from another.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    object: String,
    reason: String,
    state: String,
}

/// A notice published, with the recorder that holds its Event's series.
struct Published {
    at: Instant,
    recorder: Recorder,
}

/// Publishes Events once per state; see the module comment.
pub struct Notices {
    client: Client,
    reporter: Reporter,
    published: Mutex<HashMap<Key, Published>>,
    /// When the notices not seen for [`FORGET_AFTER`] were last dropped: at most once a second,
    /// as a provisioning round asks about thousands of pods at once.
    swept: Mutex<Option<Instant>>,
}

impl Notices {
    /// Notices published through `client` as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            published: Mutex::default(),
            swept: Mutex::default(),
        }
    }

    /// Publishes `event` about `regarding` unless the same reason and `state` were published
    /// about it less than two minutes ago. `state` is what makes two notices different (often
    /// the note itself; empty for "once per object"). Failures are logged, not returned: an
    /// Event is never worth failing a reconcile for.
    pub(crate) async fn publish(&self, event: &Event, regarding: &ObjectReference, state: &str) {
        self.publish_if(event, regarding, state, || true).await;
    }

    /// [`Notices::publish`], but a notice that would go out goes out only if `allowed()` says
    /// so (a rate limit, asked only for what passed the dedupe); one it refuses is not
    /// remembered, so it may go out on the next try.
    pub(crate) async fn publish_if(
        &self,
        event: &Event,
        regarding: &ObjectReference,
        state: &str,
        allowed: impl FnOnce() -> bool,
    ) {
        let key = Key {
            object: regarding
                .uid
                .clone()
                .or_else(|| regarding.name.clone())
                .unwrap_or_default(),
            reason: event.reason.clone(),
            state: state.to_owned(),
        };
        let Some(recorder) = self.admit(key, Instant::now(), allowed) else {
            return;
        };
        if let Err(e) = recorder.publish(&within_limit(event), regarding).await {
            warn!(object = ?regarding.name, reason = %event.reason, error = %e, "could not publish event");
        }
    }

    /// Publishes `event` about `regarding` as a new Event, without remembering it: for Events
    /// that happen once to an object (the lifecycle's: a claim launched, its launch failing
    /// for a new reason, its instance found gone). kube's [`Recorder`] keeps every Event it published for six minutes, to fold a
    /// repeat into its series; at ~2.4 KB an Event, that was 12 MiB of the agent's heap in a
    /// 5,000-node scale-out (heaptrack, `tests/kwok/heap.sh`), for repeats that never come.
    /// Failures are logged, not returned.
    pub(crate) async fn publish_once(&self, event: &Event, regarding: &ObjectReference) {
        // A recorder of its own, dropped with its one cached Event.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&within_limit(event), regarding).await {
            warn!(object = ?regarding.name, reason = %event.reason, error = %e, "could not publish event");
        }
    }

    /// The recorder to publish the notice `key` with at `now`, or `None` if it was published
    /// less than [`REPEAT_AFTER`] ago or `allowed()` refuses it.
    fn admit(&self, key: Key, now: Instant, allowed: impl FnOnce() -> bool) -> Option<Recorder> {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut swept = self
            .swept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if swept.is_none_or(|at| now.saturating_duration_since(at) >= SWEEP_EVERY) {
            published.retain(|_, p| now.saturating_duration_since(p.at) < FORGET_AFTER);
            *swept = Some(now);
        }
        drop(swept);
        if let Some(p) = published.get_mut(&key) {
            if now.saturating_duration_since(p.at) < REPEAT_AFTER || !allowed() {
                return None;
            }
            p.at = now;
            return Some(p.recorder.clone());
        }
        if !allowed() {
            return None;
        }
        // A recorder of its own, so this state's Event is not folded into another state's.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        published.insert(
            key,
            Published {
                at: now,
                recorder: recorder.clone(),
            },
        );
        Some(recorder)
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn notices() -> Notices {
        // Never contacted: these tests only ask which notices get through.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        Notices::new(
            client,
            Reporter {
                controller: "test".to_owned(),
                instance: None,
            },
        )
    }

    fn key(state: &str) -> Key {
        Key {
            object: "node-uid".to_owned(),
            reason: "FailedDraining".to_owned(),
            state: state.to_owned(),
        }
    }

    #[test]
    fn a_note_longer_than_the_api_server_takes_is_cut_to_fit() {
        let event = |note: String| Event {
            type_: kube::runtime::events::EventType::Warning,
            reason: "DisruptionBlocked".to_owned(),
            note: Some(note),
            action: "Disrupt".to_owned(),
            secondary: None,
        };
        let long = event("é".repeat(700));
        let cut = within_limit(&long).note.expect("a note");
        assert!(cut.len() <= NOTE_LIMIT, "{} bytes", cut.len());
        assert!(cut.ends_with("é…"));
        let short = event("fits".to_owned());
        assert_eq!(within_limit(&short).note.as_deref(), Some("fits"));
    }

    #[tokio::test]
    async fn the_same_notice_is_published_once_per_two_minutes_and_a_new_state_at_once() {
        let notices = notices();
        let start = Instant::now();
        assert!(notices.admit(key("3 pods"), start, || true).is_some());
        assert!(
            notices
                .admit(key("3 pods"), start + Duration::from_secs(2), || true)
                .is_none()
        );
        assert!(
            notices
                .admit(key("2 pods"), start + Duration::from_secs(4), || true)
                .is_some()
        );
        assert!(
            notices
                .admit(key("3 pods"), start + Duration::from_secs(119), || true)
                .is_none()
        );
        assert!(
            notices
                .admit(key("3 pods"), start + Duration::from_secs(121), || true)
                .is_some()
        );
    }

    #[tokio::test]
    async fn a_notice_the_rate_limit_refused_goes_out_on_the_next_try() {
        let notices = notices();
        let start = Instant::now();
        assert!(notices.admit(key("a"), start, || false).is_none());
        assert!(
            notices
                .admit(key("a"), start + Duration::from_secs(1), || true)
                .is_some()
        );
    }

    #[tokio::test]
    async fn a_notice_not_seen_for_five_minutes_is_forgotten() {
        let notices = notices();
        let start = Instant::now();
        assert!(notices.admit(key("a"), start, || true).is_some());
        assert!(
            notices
                .admit(key("b"), start + Duration::from_secs(301), || true)
                .is_some()
        );
        let remembered = notices
            .published
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        assert_eq!(remembered, 1);
    }
}
