//! Runs one scenario under one seed and prints what the checker found (a debugging aid; the
//! `gregor-sim` CLI is the real front end).
use gregor_sim::run::{run_scenario, RunOptions};
use gregor_sim::scenario::Scenario;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: one_run SCENARIO [SEED]");
    let seed = args.next().map_or(0, |s| s.parse().expect("a seed is a number"));
    let scenario = Scenario::load(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{e}"));
    let result = run_scenario(
        &scenario,
        &RunOptions {
            seed,
            print_trace: std::env::var("TRACE").is_ok(),
            trace_filter: None,
        },
    );
    println!(
        "{} seed {}: error={:?} simulated={} ms wall={} ms hash={:x}",
        result.scenario, seed, result.error, result.simulated_ms, result.wall_ms, result.trace_hash
    );
    println!("{}", result.report.summary());
    if let Ok(range) = std::env::var("SHOW") {
        let (p, lo, hi) = {
            let v: Vec<i64> = range
                .split(',')
                .map(|x| x.parse().expect("SHOW=partition,lo,hi"))
                .collect();
            (v[0] as i32, v[1], v[2])
        };
        for s in result.history.sends.iter().filter(|s| s.partition.index == p) {
            if let gregor_sim::history::SendOutcome::Acked { offset } = s.outcome {
                if (lo..=hi).contains(&offset) {
                    println!("  send {:?} acked at {offset} at {} ms", s.value, s.at_ms);
                }
            }
        }
        for q in result
            .history
            .polls
            .iter()
            .filter(|q| q.partition.index == p && (lo..=hi).contains(&q.offset))
        {
            println!(
                "  poll c{} s{} offset {} {:?} at {} ms",
                q.consumer, q.session, q.offset, q.value, q.at_ms
            );
        }
    }
    for f in &result.faults {
        println!("  fault {:?}", f);
    }
}
