//! What the replicas judged, and the accounting: per stratum, summed over replicas and restarts,
//! traces produced = received = offline-judged, sampled = the sampler's choice = LLM-judged +
//! skipped, and the verdict records hold exactly the LLM-judged traces, once each.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use ragwatch::dimensions::Quality;
use serde_json::Value;

use super::STRATA;
use super::exact::TraceInfo;
use super::replicas::{Replica, total};
use crate::common::Samples;

/// The LLM verdict of each judged trace: its three scores.
pub(super) type Verdicts = HashMap<String, [Option<f64>; 3]>;

/// The replicas' verdict records: the judged traces' verdicts, the records by status, and the
/// traces with two records.
pub(super) struct Records {
    pub(super) verdicts: Verdicts,
    pub(super) by_status: BTreeMap<String, u64>,
    pub(super) duplicates: Vec<String>,
}

impl Records {
    pub(super) fn read(replicas: &[&Replica]) -> Records {
        let mut out = Records {
            verdicts: HashMap::new(),
            by_status: BTreeMap::new(),
            duplicates: Vec::new(),
        };
        for r in replicas {
            let text = std::fs::read_to_string(&r.records).unwrap_or_default();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: Value = serde_json::from_str(line).unwrap();
                let status = v["status"].as_str().unwrap_or("?").to_owned();
                *out.by_status.entry(status.clone()).or_default() += 1;
                if status != "judged" {
                    continue;
                }
                let id = v["trace_id"].as_str().unwrap().to_owned();
                let scores = [0, 1, 2].map(|i| v[Quality::ALL[i].name()].as_f64());
                if out.verdicts.insert(id.clone(), scores).is_some() {
                    out.duplicates.push(id);
                }
            }
        }
        out
    }
}

/// The fleet's and the lone replica's records: the lone replica judged the same sample (the
/// stand-in's noise follows the order of its calls, so its verdicts are its own); no trace has two
/// records; no record is of a trace the sampler would not take.
pub(super) fn check_records(
    fleet: &Records,
    solo: &Records,
    traces: &BTreeMap<String, TraceInfo>,
    problems: &mut Vec<String>,
) {
    let (fleet_ids, solo_ids): (BTreeSet<&String>, BTreeSet<&String>) = (
        fleet.verdicts.keys().collect(),
        solo.verdicts.keys().collect(),
    );
    if fleet_ids != solo_ids {
        problems.push(format!(
            "the lone replica judged {} traces, the fleet {}; {} differ",
            solo_ids.len(),
            fleet_ids.len(),
            fleet_ids.symmetric_difference(&solo_ids).count()
        ));
    }
    let duplicates: Vec<&String> = fleet.duplicates.iter().chain(&solo.duplicates).collect();
    if !duplicates.is_empty() {
        problems.push(format!(
            "{} traces with two verdict records: {:?}",
            duplicates.len(),
            &duplicates[..duplicates.len().min(5)]
        ));
    }
    let not_sampled: Vec<&String> = fleet
        .verdicts
        .keys()
        .filter(|id| traces.get(*id).is_none_or(|t| t.sampled.is_none()))
        .collect();
    if !not_sampled.is_empty() {
        problems.push(format!(
            "{} verdict records of traces the sampler would not take: {:?}",
            not_sampled.len(),
            &not_sampled[..not_sampled.len().min(5)]
        ));
    }
}

/// Prints the reasons traces of stratum `s` were skipped.
fn print_skipped(fleet: &[Samples], s: &str) {
    let reasons: Vec<String> = fleet
        .iter()
        .flat_map(|m| m.0.iter())
        .filter(|(n, l, v)| {
            n == "ragwatch_traces_skipped_total"
                && l.get("stratum").map(String::as_str) == Some(s)
                && *v > 0.0
        })
        .map(|(_, l, v)| format!("{} {v}", l["reason"]))
        .collect();
    eprintln!("skipped in {s}: {}", reasons.join(", "));
}

/// The accounting table, per stratum over every replica and incarnation; what does not add up is
/// a problem.
pub(super) fn accounting(
    fleet: &[Samples],
    produced: &BTreeMap<String, f64>,
    traces: &BTreeMap<String, TraceInfo>,
    verdicts: &Verdicts,
    problems: &mut Vec<String>,
) -> String {
    let mut table = String::from(
        "stratum        produced received off-judged  sampled(exp) llm-judged records  skipped rejected\n",
    );
    let rejected = total(fleet, "ragwatch_traces_rejected_total", &[]);
    for s in STRATA {
        let of = |name: &str, extra: &[(&str, &str)]| {
            let mut l = vec![("stratum", s)];
            l.extend_from_slice(extra);
            total(fleet, name, &l)
        };
        let produced_s = produced[s];
        let received = of("ragwatch_traces_received_total", &[]);
        let offline = of("ragwatch_traces_judged_total", &[("judge", "offline")]);
        let sampled = of("ragwatch_traces_sampled_total", &[]);
        let llm = of("ragwatch_traces_judged_total", &[("judge", "llm")]);
        let skipped = of("ragwatch_traces_skipped_total", &[]);
        let expected_sampled = traces
            .values()
            .filter(|t| t.stratum == s && t.sampled.is_some())
            .count() as f64;
        let records = verdicts
            .keys()
            .filter(|id| traces.get(*id).is_some_and(|t| t.stratum == s))
            .count() as f64;
        writeln!(
            table,
            "{s:<14} {produced_s:>8} {received:>8} {offline:>10} {sampled:>7}({expected_sampled:>4}) {llm:>10} {records:>7} {skipped:>8} {rejected:>8}"
        )
        .unwrap();
        let mut check = |what: &str, a: f64, b: f64| {
            if a != b {
                problems.push(format!("accounting {s}: {what}: {a} != {b}"));
            }
        };
        check("received = produced", received, produced_s);
        check("offline-judged = received", offline, received);
        check("sampled = the sampler's choice", sampled, expected_sampled);
        check("LLM-judged + skipped = sampled", llm + skipped, sampled);
        check("verdict records = LLM-judged", records, llm);
        if skipped > 0.0 {
            print_skipped(fleet, s);
        }
    }
    if rejected != 0.0 {
        problems.push(format!("{rejected} messages rejected"));
    }
    table
}
