//! Time in the fleet test: batches on a fixed cadence, the tests' windows, and which batches lie
//! inside a window ending at a moment, so that a window's edges fall in quiet time.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{MARGIN, SLOT};
use crate::common::prometheus::{WINDOWS, unix_secs};

/// A batch: its traces, when it was produced and when it was over (Unix seconds).
pub(super) struct Batch {
    pub(super) label: String,
    pub(super) ids: Vec<String>,
    pub(super) start: f64,
    pub(super) settled: f64,
}

pub(super) fn sleep_until(t: f64) {
    let now = unix_secs();
    if t > now {
        std::thread::sleep(Duration::from_secs_f64(t - now));
    }
}

/// "20s" -> 20.0 (Prometheus duration units: ms, s, m, h, d).
fn seconds(range: &str) -> f64 {
    let mut total = 0.0;
    let mut number = String::new();
    let mut chars = range.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            0.001
        } else {
            match c {
                's' => 1.0,
                'm' => 60.0,
                'h' => 3600.0,
                'd' => 86400.0,
                _ => panic!("unknown unit in {range:?}"),
            }
        };
        total += number.parse::<f64>().unwrap() * unit;
        number.clear();
    }
    total
}

/// The test's length of a shipped window (5m, 1h, 24h) in seconds.
pub(super) fn window(shipped: &str) -> f64 {
    let i = ["5m", "1h", "24h"]
        .iter()
        .position(|w| *w == shipped)
        .unwrap_or_else(|| panic!("{shipped} is not a scoring window"));
    WINDOWS[i] as f64
}

/// The longest evaluation interval of any rule group in `rules` (1 s, the global one, if none
/// says more): a batch's counts reach a recorded series at most this long after the scrape.
pub(super) fn longest_interval(rules: &str) -> f64 {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("interval:"))
        .map(|v| seconds(v.trim().trim_matches('"')))
        .fold(1.0, f64::max)
}

/// Which batches lie inside the window ending at a moment `t` (any evaluation in `[t - lag, t]`):
/// `Err` when a batch's traffic (from its start to `lag` after it settled) meets a window edge.
pub(super) fn inside(
    batches: &[Batch],
    t: f64,
    w: f64,
    lag: f64,
) -> Result<BTreeSet<usize>, String> {
    let mut set = BTreeSet::new();
    for (i, b) in batches.iter().enumerate() {
        let (s, e) = (b.start, b.settled + lag);
        if s > t - w + MARGIN && e < t - lag - MARGIN {
            set.insert(i);
        } else if e < t - lag - w - MARGIN || s > t + MARGIN {
        } else {
            return Err(format!(
                "batch {} ({:.1}..{:.1} s) meets an edge of the {w} s window ending at {:.1} s",
                b.label, s, e, t
            ));
        }
    }
    Ok(set)
}

/// A moment the pooled rules are read at: its name, when (Unix seconds), after what, and the
/// batches inside its short, middle and whole baseline window and in the baseline without the
/// short window.
pub(super) struct Moment {
    pub(super) name: &'static str,
    pub(super) t: f64,
    pub(super) what: &'static str,
    pub(super) sets: [BTreeSet<usize>; 4],
}

/// The first quiet instant after `batches[b]` (before the next batch) whose windows' edges all
/// fall in quiet time (at the same point of its slot as the edges' slots, by the cadence).
fn first_quiet_moment(
    batches: &[Batch],
    b: usize,
    lag: f64,
) -> Result<(f64, [BTreeSet<usize>; 4]), String> {
    let (w_short, w_mid, w_long) = (window("5m"), window("1h"), window("24h"));
    let from = batches[b].settled + lag + MARGIN + lag;
    let until = batches.get(b + 1).map_or(from + SLOT, |n| n.start - MARGIN);
    let mut t = from;
    let mut last_err = String::new();
    while t <= until {
        let sets = (
            inside(batches, t, w_short, lag),
            inside(batches, t, w_mid, lag),
            inside(batches, t, w_long, lag),
        );
        match sets {
            (Ok(a), Ok(m), Ok(l)) => {
                let rest: BTreeSet<usize> = l.difference(&a).copied().collect();
                return Ok((t, [a, m, l, rest]));
            }
            (a, m, l) => {
                last_err = [a.err(), m.err(), l.err()]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        }
        t += 0.25;
    }
    Err(last_err)
}

/// The four moments: after the late joiner's first and second batches, after the restarted
/// replica's first and second batches. A moment that cannot be found is a problem.
pub(super) fn find_moments(batches: &[Batch], lag: f64, problems: &mut Vec<String>) -> Vec<Moment> {
    let anchors = [
        ("M1", 3usize, "ragwatch-2's first batch (b3)"),
        ("M2", 4, "ragwatch-2's second batch (b4)"),
        ("M3", 5, "ragwatch-1's first batch after its restart (b5)"),
        ("M4", 6, "ragwatch-1's second batch after its restart (b6)"),
    ];
    let mut moments = Vec::new();
    for (name, b, what) in anchors {
        match first_quiet_moment(batches, b, lag) {
            Ok((t, sets)) => moments.push(Moment {
                name,
                t,
                what,
                sets,
            }),
            Err(last_err) => problems.push(format!(
                "{name} ({what}): no moment whose window edges all fall in quiet time ({last_err})"
            )),
        }
    }
    moments
}
