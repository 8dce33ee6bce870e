//! How facts word a span of time: kubectl's AGE notation. Explanations and disruption decisions
//! say "5m before launch" or "in 61m", and those sentences are part of the facts (`-o json` and
//! Events carry them), so the wording sits low enough for both to share it. The plugin's AGE column (`age`) builds on it but is presentation, so it lives
//! in the plugin.

use k8s_openapi::jiff::SignedDuration;

/// `kubectl`'s AGE notation (`45s`, `5m`, `3h`, `2d`, `4m10s` when it matters), as
/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration` prints it.
pub fn human_duration(duration: SignedDuration) -> String {
    let seconds = duration.as_secs();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn ages_print_as_kubectl_prints_them() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 600, "3h10m"),
            (30 * 3600, "30h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(secs)),
                want,
                "{secs}s"
            );
        }
    }
}
