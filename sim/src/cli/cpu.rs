//! The CPU time the `gregor-sim` process has used, for the figure issue #3 sets its target in:
//! simulated seconds per CPU second of the whole command (every seed's thread, the checker, the
//! results' handling, the process's start), beside the per-seed wall figure of the summary table.
//!
//! Read from `/proc/self/stat` (Linux; `None` elsewhere or when unreadable): its `utime` and
//! `stime` count the process's threads, those that have ended included, in clock ticks of
//! `USER_HZ`, which Linux fixes at 100 a second for user space on x86-64 and arm64.

use std::time::Duration;

/// Clock ticks a second in `/proc/<pid>/stat` (Linux's `USER_HZ`).
const TICKS_PER_S: u64 = 100;

/// User plus system CPU time of this process so far.
pub fn process_cpu_time() -> Option<Duration> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// `utime + stime` from the text of a `/proc/<pid>/stat`. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself: fields are counted after the last `)`.
pub fn parse_stat(stat: &str) -> Option<Duration> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_ascii_whitespace();
    // After the name: state (3), ppid, pgrp, session, tty_nr, tpgid, flags, minflt, cminflt,
    // majflt, cmajflt, utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime.checked_add(stime)?;
    Some(Duration::from_millis(ticks.checked_mul(1_000 / TICKS_PER_S)?))
}

/// The summary's last line: seeds, simulated seconds, and simulated seconds per CPU second of
/// the whole command (when known) and per wall second.
pub fn totals_line(seeds: usize, simulated_ms: u64, wall: Duration, cpu: Option<Duration>, jobs: usize) -> String {
    let simulated_s = simulated_ms as f64 / 1_000.0;
    let per = |d: Duration| simulated_s / d.as_secs_f64().max(1e-3);
    let jobs_word = if jobs == 1 { "job" } else { "jobs" };
    match cpu {
        Some(cpu) => format!(
            "{seeds} seeds: {simulated_s:.1} simulated s in {:.2} CPU s and {:.2} wall s ({jobs} {jobs_word}): \
             {:.0} simulated s per CPU s, {:.0} per wall s",
            cpu.as_secs_f64(),
            wall.as_secs_f64(),
            per(cpu),
            per(wall)
        ),
        None => format!(
            "{seeds} seeds: {simulated_s:.1} simulated s in {:.2} wall s ({jobs} {jobs_word}): {:.0} simulated s per wall s",
            wall.as_secs_f64(),
            per(wall)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utime_and_stime_are_read_after_the_last_parenthesis() {
        // A real line's shape, the name holding a space and a parenthesis; utime 187, stime 23.
        let stat = "4242 (gregor (sim) x) R 1 4242 4242 0 -1 4194304 1300 0 0 0 187 23 0 0 20 0 3 0 999 1 2";
        assert_eq!(parse_stat(stat), Some(Duration::from_millis(2_100)));
        assert_eq!(parse_stat("4242 (x) R 1 2"), None, "too few fields");
        assert_eq!(parse_stat("no parenthesis at all"), None);
        assert_eq!(parse_stat("1 (x) R 1 1 1 0 -1 0 0 0 0 0 ab 1"), None, "not a number");
    }

    #[test]
    fn this_process_has_used_some_cpu_time_and_it_grows() {
        let Some(before) = process_cpu_time() else {
            println!("no /proc/self/stat here: nothing to compare");
            return;
        };
        let mut x = 0u64;
        let start = std::time::Instant::now();
        // Spin (bounded) until the process's CPU time moves by at least one tick.
        while start.elapsed() < Duration::from_secs(5) {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            if process_cpu_time().is_some_and(|now| now > before) {
                break;
            }
        }
        let after = process_cpu_time().expect("read once already");
        println!("cpu time {before:?} -> {after:?} ({x})");
        assert!(
            after > before,
            "CPU time did not grow while spinning: {before:?} -> {after:?}"
        );
    }

    #[test]
    fn the_totals_line_divides_simulated_time_by_cpu_and_wall_time() {
        let line = totals_line(
            31,
            1_267_200,
            Duration::from_millis(1_930),
            Some(Duration::from_millis(1_890)),
            1,
        );
        assert_eq!(
            line,
            "31 seeds: 1267.2 simulated s in 1.89 CPU s and 1.93 wall s (1 job): 670 simulated s per CPU s, 657 per wall s"
        );
        let line = totals_line(2, 80_000, Duration::from_secs(2), None, 2);
        assert_eq!(
            line,
            "2 seeds: 80.0 simulated s in 2.00 wall s (2 jobs): 40 simulated s per wall s"
        );
    }
}
