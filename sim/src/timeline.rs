//! A picture of one run: `gregor-sim replay --timeline FILE` writes an SVG with one lane per node,
//! the faults as bars (from the fault to its opposite), every acknowledged send as a tick on its
//! producer's lane, consumer polls on theirs, and each acknowledged record the final read no
//! longer holds as a red mark, the first one labelled with the fault that came after it. A reader
//! sees when records were acknowledged, what happened to the node holding them, and that they
//! were gone afterwards, without reading code.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use crate::history::{Partition, SendOutcome, Value};
use crate::run::RunResult;

const LEFT: f64 = 170.0;
const WIDTH: f64 = 1000.0;
const LANE: f64 = 34.0;
const TOP: f64 = 60.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Words that end a fault on a lane (the opposites).
fn is_opposite(what: &str) -> bool {
    [
        "restart", "resume", "rejoin", "repair", "drain", "heal", "unskew", "unclog",
    ]
    .iter()
    .any(|w| what.starts_with(w))
}

/// The lane a fault event belongs to: `leader=broker-1` is broker-1's.
fn lane_of(node: &str) -> String {
    node.rsplit('=').next().unwrap_or(node).to_string()
}

pub fn render(result: &RunResult, title: &str) -> String {
    let h = &result.history;
    let end_ms = result.simulated_ms.max(1) as f64;
    let x = |ms: u64| LEFT + WIDTH * (ms as f64 / end_ms).min(1.0);

    let mut lanes: Vec<String> = Vec::new();
    let add = |name: String, lanes: &mut Vec<String>| {
        if !lanes.contains(&name) {
            lanes.push(name);
        }
    };
    for f in &result.faults {
        add(lane_of(&f.node), &mut lanes);
    }
    for p in h.sends.iter().map(|s| s.producer).collect::<BTreeSet<_>>() {
        add(format!("producer-{p}"), &mut lanes);
    }
    for c in h.polls.iter().map(|p| p.consumer).collect::<BTreeSet<_>>() {
        add(format!("consumer-{c}"), &mut lanes);
    }
    let y = |lane: &str, lanes: &[String]| TOP + LANE * lanes.iter().position(|l| l == lane).unwrap_or(0) as f64;
    let height = TOP + LANE * lanes.len() as f64 + 80.0 + 18.0 * 12.0;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="monospace" font-size="12">"#,
        LEFT + WIDTH + 40.0
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="10" y="22" font-size="15">{}</text>"#, esc(title));
    for (i, lane) in lanes.iter().enumerate() {
        let ly = TOP + LANE * i as f64;
        let _ = writeln!(svg, r#"<text x="10" y="{}">{}</text>"#, ly + 4.0, esc(lane));
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{ly}" x2="{}" y2="{ly}" stroke="#ccc"/>"##,
            LEFT + WIDTH
        );
    }
    // Time axis, every 5 simulated seconds.
    let axis_y = TOP + LANE * lanes.len() as f64;
    let mut t = 0u64;
    while (t as f64) <= end_ms {
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" fill="#666">{}s</text>"##,
            x(t) - 6.0,
            axis_y + 4.0,
            t / 1000
        );
        t += 5_000;
    }

    // Faults: a bar from each fault to the next event on its lane (its opposite), or the end.
    let mut open: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut bars = Vec::new();
    for f in &result.faults {
        let lane = lane_of(&f.node);
        if is_opposite(&f.what) {
            if let Some((from, what)) = open.remove(&lane) {
                bars.push((lane, from, f.at_ms, what));
            }
        } else if !f.what.contains("skipped") {
            open.insert(lane, (f.at_ms, f.what.clone()));
        }
    }
    for (lane, (from, what)) in open {
        bars.push((lane, from, result.simulated_ms, what));
    }
    for (lane, from, to, what) in &bars {
        let ly = y(lane, &lanes);
        let _ = writeln!(
            svg,
            r##"<rect x="{}" y="{}" width="{}" height="16" fill="#f4a261" opacity="0.8"><title>{}</title></rect><text x="{}" y="{}">{}</text>"##,
            x(*from),
            ly - 8.0,
            (x(*to) - x(*from)).max(2.0),
            esc(&format!(
                "{what} {lane} {:.1}s to {:.1}s",
                *from as f64 / 1000.0,
                *to as f64 / 1000.0
            )),
            x(*from) + 2.0,
            ly + 4.0,
            esc(what)
        );
    }

    // Sends (ticks), and acknowledged records the final read lacks (red).
    let in_log: BTreeSet<(Partition, i64, Value)> = h
        .final_reads
        .iter()
        .flat_map(|(&p, r)| r.records.iter().map(move |&(o, v)| (p, o, v)))
        .collect();
    let mut first_lost = None;
    let mut lost = 0usize;
    for s in &h.sends {
        let SendOutcome::Acked { offset } = s.outcome else {
            continue;
        };
        let ly = y(&format!("producer-{}", s.producer), &lanes);
        let gone = h
            .final_reads
            .get(&s.partition)
            .is_some_and(|r| offset >= r.log_start_offset)
            && !in_log.contains(&(s.partition, offset, s.value));
        if gone {
            lost += 1;
            first_lost.get_or_insert((s.at_ms, s.partition, offset, s.producer));
            let _ = writeln!(
                svg,
                r##"<circle cx="{}" cy="{}" r="2.5" fill="#d62828"/>"##,
                x(s.at_ms),
                ly + 10.0
            );
        } else {
            let _ = writeln!(
                svg,
                r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#2a9d8f" opacity="0.35"/>"##,
                x(s.at_ms),
                ly + 4.0,
                ly + 9.0
            );
        }
    }
    let step = (h.polls.len() / 1500).max(1);
    for p in h.polls.iter().step_by(step) {
        let ly = y(&format!("consumer-{}", p.consumer), &lanes);
        let _ = writeln!(
            svg,
            r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#457b9d" opacity="0.35"/>"##,
            x(p.at_ms),
            ly + 4.0,
            ly + 9.0
        );
    }
    let legend_y = axis_y + 30.0;
    let mut lines = vec![format!(
        "orange: faults (to their opposite) · green ticks: acknowledged sends · blue: polls · red: acknowledged, missing from the final read ({lost})"
    )];
    if let Some((at, p, o, producer)) = first_lost {
        let after = result.faults.iter().find(|f| f.at_ms >= at && !is_opposite(&f.what));
        let then = after.map_or(String::new(), |f| {
            format!(", then {} {} at {:.3}s", f.what, f.node, f.at_ms as f64 / 1000.0)
        });
        lines.push(format!(
            "first lost: producer-{producer}'s record at partition {} offset {o}, acknowledged at {:.3}s{then}",
            h.partition(p),
            at as f64 / 1000.0
        ));
    }
    let summary = result.report.summary();
    lines.extend(summary.lines().map(|l| l.trim().to_string()));
    for (i, line) in lines.iter().enumerate() {
        let _ = writeln!(
            svg,
            r#"<text x="10" y="{}">{}</text>"#,
            legend_y + 18.0 * i as f64,
            esc(line)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::Report;
    use crate::history::{FinalRead, History, Send};
    use crate::nemesis::FaultEvent;

    #[test]
    fn lost_records_are_marked_and_faults_drawn() {
        let value = Value::new(0, 0);
        let mut history = History::default();
        history.sends.push(Send {
            producer: 0,
            partition: Partition::of_first(0),
            value,
            outcome: SendOutcome::Acked { offset: 0 },
            at_ms: 1_000,
        });
        history.final_reads.insert(
            Partition::of_first(0),
            FinalRead {
                log_start_offset: 0,
                high_watermark: 0,
                records: vec![],
            },
        );
        let result = RunResult {
            scenario: "s".into(),
            seed: 1,
            report: Report::default(),
            trace_hash: 0,
            simulated_ms: 10_000,
            wall_ms: 1,
            played: Vec::new(),
            faults: vec![
                FaultEvent {
                    at_ms: 2_000,
                    node: "broker-0".into(),
                    what: "crash".into(),
                },
                FaultEvent {
                    at_ms: 4_000,
                    node: "broker-0".into(),
                    what: "restart".into(),
                },
            ],
            history,
            error: None,
            coverage: Default::default(),
        };
        let svg = render(&result, "t");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("#d62828"), "the lost record is not marked");
        assert!(svg.contains("crash broker-0 2.0s to 4.0s"), "the fault bar is missing");
        assert!(
            svg.contains("acknowledged at 1.000s, then crash broker-0 at 2.000s"),
            "{svg}"
        );
        let mut kept = result.clone();
        kept.history
            .final_reads
            .get_mut(&Partition::of_first(0))
            .expect("read")
            .records
            .push((0, value));
        assert!(!render(&kept, "t").contains("#d62828"), "a kept record marked lost");
    }
}
