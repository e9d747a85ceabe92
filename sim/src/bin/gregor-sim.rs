//! `gregor-sim`: runs scenarios over many seeds and judges them, replays one seed with its trace,
//! and checks that a seed replays identically. Arguments and terminal output only; what is
//! computed lives in `gregor_sim::cli`.
//!
//! ```text
//! gregor-sim run scenarios/*.toml --seeds 0..100 --jobs 2
//! gregor-sim replay scenarios/acks_all_leader_crash.toml --seed 17 --filter nemesis=info,gregor_core=debug
//! gregor-sim check-determinism scenarios/*.toml --seeds 0..10
//! gregor-sim shrink scenarios/storm/acks1_crash_storm_loses_acknowledged.toml --seed 3 --out shrunk.toml
//! gregor-sim campaign --budget 10m --jobs 2 --corpus corpus.toml
//! gregor-sim replay --from-corpus corpus.toml --index 0
//! ```
//!
//! Exit status: 0 when every verdict passes, 1 when one fails (or a determinism check finds a
//! difference), 2 when the command cannot run (a scenario does not parse, a bad filter).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gregor_sim::cli::cpu::{process_cpu_time, totals_line};
use gregor_sim::cli::exec::{run_jobs, run_one, workers, Histories, Job};
use gregor_sim::cli::seeds::Seeds;
use gregor_sim::cli::verdict::{coverage_table, markdown_table, seed_status, summarize, table, RuleRow, SeedStatus};
use gregor_sim::cli::{differences, replay_line, RunOptions, RunResult, Runner};
use gregor_sim::scenario::Scenario;
use indicatif::{ProgressBar, ProgressStyle};

/// mimalloc rather than glibc's malloc: a simulated cluster allocates and frees small blocks
/// at a high rate (a seed of the batched benchmark, ~500,000), and glibc's free path was ~15%
/// of its instructions. BENCHMARKS.md has the measurements. The allocator cannot change a
/// trace: the trace hashes of every scenario are the same under both.
#[global_allocator]
static ALLOCATOR: Mimalloc = Mimalloc;

/// mimalloc through its plain entry points where the layout allows it. The `mimalloc` crate
/// calls `mi_malloc_aligned` for every layout, whose alignment checks cost ~15 instructions an
/// allocation before they reach the same free-list pop: 3% of a batched seed's instructions.
/// Every block `mi_malloc` returns is aligned to at least 8 bytes (its size classes are whole
/// words), so a layout asking 8 or less takes the plain path; anything stricter the aligned one.
/// Zeroed blocks come from `GlobalAlloc`'s default (`alloc`, then zeroes), rare on hot paths.
struct Mimalloc;

/// What `mi_malloc` and `mi_realloc` guarantee for any size (a machine word).
const MI_PLAIN_ALIGN: usize = 8;

// The simulator's second `unsafe` (see `keep_freed_pages` for the first): a global allocator
// is an `unsafe` trait, and mimalloc is reached through its C API only.
#[allow(unsafe_code)]
// SAFETY: every method hands the layout's size to mimalloc and returns its block: plain when
// the layout's alignment is at most `MI_PLAIN_ALIGN`, which every mimalloc block meets, else
// through the `_aligned` entry point with the layout's alignment. `mi_free` takes a block of
// either kind, and `mi_realloc` keeps at least the word alignment the plain path promised.
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: see the impl.
        unsafe {
            if align <= MI_PLAIN_ALIGN {
                libmimalloc_sys::mi_malloc(size).cast()
            } else {
                libmimalloc_sys::mi_malloc_aligned(size, align).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: see the impl; `ptr` came from this allocator.
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        // SAFETY: see the impl; `ptr` came from this allocator with `layout`.
        unsafe {
            if align <= MI_PLAIN_ALIGN {
                libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast()
            } else {
                libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, align).cast()
            }
        }
    }
}

/// `mi_option_purge_delay` in mimalloc.h's `mi_option_e` (the Rust binding names no constant
/// for it): how long freed pages wait before they are returned to the OS; -1 never.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed pages instead of returning them to the OS: every seed runs on a new thread, and
/// returning them (mimalloc's default, after a delay) cost more system time than the allocator
/// saved in user time (measured with the v3 series on a sweep of 36 scenarios: +1.8 s of
/// system time against -2.8 s of user time; off, +0.3 s).
/// The simulator's first `unsafe`: mimalloc's options are set through its C API only.
#[allow(unsafe_code)]
fn keep_freed_pages() {
    // SAFETY: sets a process-wide mimalloc option before any thread but this one exists;
    // mimalloc reads options with relaxed atomics, and -1 is a documented value of this one.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

/// `println!` for the command's output, which may go to a pipe its reader closed (`| head`):
/// there `println!` panics with a backtrace. This ends the process quietly instead, with the
/// status a shell gives a command killed by SIGPIPE (128 + 13).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(141);
        }
    }};
}

#[path = "gregor-sim/campaign.rs"]
mod campaign;
#[path = "gregor-sim/shrinking.rs"]
mod shrinking;

/// Runs Gregor clusters in a deterministic simulation, with faults, and checks what clients saw.
#[derive(Parser, Debug)]
#[command(name = "gregor-sim", version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GREGOR_SIM_COMMIT"), ")"), about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs every scenario with every seed and judges each scenario by its [expect].
    Run {
        /// Scenario files (*.toml).
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Seeds: a range `0..100` (end excluded), one seed `5`, or a list `1,2,3`.
        #[arg(long, default_value = "0..100")]
        seeds: Seeds,
        /// Runs at once (default: the number of CPUs).
        #[arg(long, short)]
        jobs: Option<usize>,
        /// Also writes the rules table (Markdown: rule, configuration, seeds, anomalies, a replay
        /// line per caught negative control) to this file, as the README's.
        #[arg(long)]
        markdown: Option<PathBuf>,
    },
    /// Runs one seed of one scenario, printing its trace, fault timeline and checker summary.
    Replay {
        /// The scenario file (or --from-corpus).
        scenario: Option<PathBuf>,
        /// The seed (default: the one the scenario pins, or the corpus entry's).
        #[arg(long)]
        seed: Option<u64>,
        #[command(flatten)]
        from: shrinking::FromCorpus,
        /// Which trace events to print, in RUST_LOG syntax (e.g. `nemesis=info,gregor_core=debug`).
        #[arg(long)]
        filter: Option<String>,
        /// Writes an SVG timeline of the run: nodes, faults, sends, polls, lost records.
        #[arg(long)]
        timeline: Option<PathBuf>,
    },
    /// Benchmarks the batching producer against one broker in virtual time: linger.ms 0 and 5 by
    /// batch.size 16 KiB and 1 MiB, records per simulated second and bytes per Produce request.
    BenchProducer {
        #[arg(long, default_value = "0..3")]
        seeds: Seeds,
        #[arg(long, default_value_t = 50_000)]
        records: u64,
        #[arg(long, default_value_t = 100)]
        record_bytes: usize,
        #[arg(long, default_value_t = 3)]
        partitions: i32,
        /// Records offered per simulated ms (0: as fast as send() takes them).
        #[arg(long, default_value_t = 0)]
        rate_per_ms: u64,
    },
    /// Shrinks a failing seed: replays the faults it played as an explicit schedule, cuts faults,
    /// duration, clients, rate and nodes while it still fails the same way, and writes the
    /// smallest case as a scenario pinned to the seed.
    Shrink(shrinking::ShrinkArgs),
    /// Runs the safe scenarios with fresh seeds until the budget is spent; failing seeds go to a
    /// corpus file that `replay` and `shrink` read.
    Campaign(campaign::CampaignArgs),
    /// Runs every seed twice and fails if the two runs' trace hashes or reports differ.
    CheckDeterminism {
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        #[arg(long, default_value = "0..10")]
        seeds: Seeds,
        #[arg(long, short)]
        jobs: Option<usize>,
    },
}

/// What runs a seed: the real simulator.
fn runner() -> &'static dyn Runner {
    &gregor_sim::run::run_scenario
}

fn main() -> ExitCode {
    keep_freed_pages();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Run {
            scenarios,
            seeds,
            jobs,
            markdown,
        } => run(&scenarios, &seeds, jobs, markdown.as_deref()),
        Command::Replay {
            scenario,
            seed,
            from,
            filter,
            timeline,
        } => shrinking::target(scenario, seed, &from).and_then(|(path, seed)| replay(&path, seed, filter, timeline)),
        Command::Shrink(args) => shrinking::run(args),
        Command::Campaign(args) => campaign::run(args),
        Command::CheckDeterminism { scenarios, seeds, jobs } => check_determinism(&scenarios, &seeds, jobs),
        Command::BenchProducer {
            seeds,
            records,
            record_bytes,
            partitions,
            rate_per_ms,
        } => bench_producer(&seeds, records, record_bytes, partitions, rate_per_ms),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gregor-sim: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The four batching configurations, each over every seed; medians.
fn bench_producer(
    seeds: &Seeds,
    records: u64,
    record_bytes: usize,
    partitions: i32,
    rate_per_ms: u64,
) -> anyhow::Result<ExitCode> {
    use gregor_sim::bench::{producer, ProducerBench};
    let seeds: Vec<u64> = seeds.0.clone();
    anyhow::ensure!(!seeds.is_empty(), "no seeds");
    outln!(
        "{records} records of {record_bytes} bytes to {partitions} partitions, offered {}, seeds {seeds:?}",
        if rate_per_ms == 0 {
            "as fast as send() takes them".to_string()
        } else {
            format!("{rate_per_ms}/ms")
        }
    );
    outln!("linger.ms  batch.size  records/sim s (median)  bytes/request (median)  requests (median)  failed");
    let mut base = None;
    for (linger_ms, batch_bytes_max) in [(0, 16_384), (5, 16_384), (0, 1 << 20), (5, 1 << 20)] {
        let mut rates = Vec::new();
        let mut sizes = Vec::new();
        let mut requests = Vec::new();
        let mut failed = 0;
        for &seed in &seeds {
            let r = producer(&ProducerBench {
                seed,
                records,
                record_bytes,
                partitions,
                linger_ms,
                batch_bytes_max,
                rate_per_ms,
            });
            failed += r.failed;
            rates.push(r.records_per_s());
            sizes.push(r.bytes_per_request());
            requests.push(r.requests as f64);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (rate, size, reqs) = (median(&mut rates), median(&mut sizes), median(&mut requests));
        let base_rate = *base.get_or_insert(rate);
        outln!(
            "{linger_ms:>9}  {batch_bytes_max:>10}  {rate:>14.0} ({:.2}x)  {size:>22.0}  {reqs:>17.0}  {failed}",
            rate / base_rate
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The scenarios, or every parse error (file:line: key: why) and exit status 2.
fn load(paths: &[PathBuf]) -> Result<Vec<Scenario>, ExitCode> {
    let mut scenarios = Vec::new();
    let mut bad = false;
    for path in paths {
        match Scenario::load(path) {
            Ok(s) => scenarios.push(s),
            Err(e) => {
                eprintln!("{e}");
                bad = true;
            }
        }
    }
    if bad {
        eprintln!("gregor-sim: nothing ran: fix the scenario(s) above");
        return Err(ExitCode::from(2));
    }
    Ok(scenarios)
}

/// The commit the binary was built from (`+dirty` when its sources had uncommitted changes), or
/// `unknown`: stamped at build time by `build.rs`.
fn commit() -> String {
    env!("GREGOR_SIM_COMMIT").to_string()
}

/// The fault kinds and rates a swarm scenario's seed ran with (`None` for other profiles).
fn swarm_of(scenario: &Scenario, seed: u64) -> Option<String> {
    gregor_sim::nemesis::active_profile(scenario, seed)
        .filter(|p| p.name == gregor_sim::nemesis::SWARM)
        .map(|p| p.describe())
}

fn parallelism(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn progress(total: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    let style = ProgressStyle::with_template(&format!(
        "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {what} {{msg}} (eta {{eta}})"
    ))
    .expect("the template is valid")
    .progress_chars("=> ");
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

fn all_jobs(scenarios: &[Scenario], seeds: &Seeds, times: usize) -> Vec<Job> {
    (0..scenarios.len())
        .flat_map(|scenario| {
            seeds
                .0
                .iter()
                .copied()
                // A scenario that pins its seed (a shrunk case) runs that seed only.
                .filter(move |&seed| scenarios[scenario].seed.is_none_or(|pinned| pinned == seed))
                .chain(scenarios[scenario].seed.filter(|p| !seeds.0.contains(p)))
                .flat_map(move |seed| std::iter::repeat_n(Job { scenario, seed }, times))
        })
        .collect()
}

fn run(
    paths: &[PathBuf],
    seeds: &Seeds,
    jobs: Option<usize>,
    markdown: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let scenarios = match load(paths) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let started = std::time::Instant::now();
    let jobs_list = all_jobs(&scenarios, seeds, 1);
    let bar = progress(jobs_list.len(), "runs");
    let mut failing = 0;
    let results = sweep(&scenarios, &jobs_list, jobs, &mut |i, result| {
        let expect = scenarios[jobs_list[i].scenario].expect.get_ref();
        if matches!(seed_status(expect, result), SeedStatus::Fail(_)) {
            failing += 1;
            bar.set_message(format!("({failing} failing)"));
        }
        bar.inc(1);
    });
    bar.finish_and_clear();

    let commit = commit();
    let mut summaries = Vec::new();
    for (index, scenario) in scenarios.iter().enumerate() {
        let mine: Vec<RunResult> = jobs_list
            .iter()
            .zip(&results)
            .filter(|(job, _)| job.scenario == index)
            .map(|(_, r)| r.clone())
            .collect();
        let summary = summarize(scenario, &mine);
        let path = paths[index].display().to_string();
        for (seed, why) in &summary.failed {
            outln!("{}: seed {seed}: {why}", scenario.name);
            if let Some(swarm) = swarm_of(scenario, *seed) {
                outln!("  {swarm}");
            }
            outln!("{}", replay_line(&path, *seed, &commit));
        }
        summaries.push(summary);
    }
    outln!("\n{}", table(&summaries));
    outln!(
        "{}\n",
        totals_line(
            results.len(),
            results.iter().map(|r| r.simulated_ms).sum(),
            started.elapsed(),
            process_cpu_time(),
            workers(parallelism(jobs), results.len()),
        )
    );
    outln!("{}", coverage_table(&summaries));
    if let Some(file) = markdown {
        let rows: Vec<RuleRow<'_>> = scenarios
            .iter()
            .zip(&summaries)
            .zip(paths)
            .map(|((scenario, summary), path)| RuleRow {
                scenario,
                path: path.display().to_string(),
                summary,
            })
            .collect();
        std::fs::write(file, markdown_table(&rows, &commit))
            .with_context(|| format!("cannot write {}", file.display()))?;
        outln!("rules table written to {}", file.display());
    }
    let failed = summaries.iter().filter(|s| !s.pass).count();
    if failed > 0 {
        outln!("{failed} of {} scenario(s) failed", summaries.len());
        return Ok(ExitCode::from(1));
    }
    outln!("all {} scenario(s) passed", summaries.len());
    Ok(ExitCode::SUCCESS)
}

fn replay(
    path: &std::path::Path,
    seed: u64,
    filter: Option<String>,
    timeline: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let scenario = match load(&[path.to_path_buf()]) {
        Ok(mut s) => s.remove(0),
        Err(code) => return Ok(code),
    };
    if let Some(filter) = &filter {
        gregor_sim::trace::parse_filter(filter).context("--filter")?;
    }
    eprintln!("replaying {} seed {seed}", scenario.name);
    if let Some(swarm) = swarm_of(&scenario, seed) {
        eprintln!("{swarm}");
    }
    let options = RunOptions {
        seed,
        print_trace: true,
        trace_filter: filter,
    };
    let result = run_one(runner(), &scenario, &options);
    outln!("\nfaults:");
    if result.faults.is_empty() {
        outln!("  none");
    }
    for f in &result.faults {
        outln!(
            "  {:>6}.{:03}s  {:<24} {}",
            f.at_ms / 1000,
            f.at_ms % 1000,
            f.node,
            f.what
        );
    }
    outln!("\n{}", result.report.summary());
    outln!("hard states reached: {}", result.coverage.names());
    if let Some(file) = &timeline {
        let title = format!("{} seed {seed}", scenario.name);
        std::fs::write(file, gregor_sim::timeline::render(&result, &title))
            .with_context(|| format!("writing the timeline to {}", file.display()))?;
        outln!("timeline written to {}", file.display());
    }
    outln!(
        "\ntrace hash {:016x}; {:.1} simulated s in {:.3} wall s",
        result.trace_hash,
        result.simulated_ms as f64 / 1000.0,
        result.wall_ms as f64 / 1000.0
    );
    let expect = scenario.expect.get_ref();
    match seed_status(expect, &result) {
        SeedStatus::Pass => {
            match &expect.anomaly {
                Some(anomaly) => outln!("seed {seed}: pass ({anomaly} caught, as this negative control expects)"),
                None => outln!("seed {seed}: pass"),
            }
            Ok(ExitCode::SUCCESS)
        }
        SeedStatus::Missed => {
            outln!("seed {seed}: the negative control's anomaly did not show on this seed");
            Ok(ExitCode::SUCCESS)
        }
        SeedStatus::Fail(why) => {
            outln!("seed {seed}: FAIL: {why}");
            outln!("{}", replay_line(&path.display().to_string(), seed, &commit()));
            Ok(ExitCode::from(1))
        }
    }
}

/// Runs `jobs_list` for a verdict only: each seed's history is dropped as it ends (see
/// [`Histories::Drop`]).
fn sweep(
    scenarios: &[Scenario],
    jobs_list: &[Job],
    jobs: Option<usize>,
    on_done: &mut dyn FnMut(usize, &RunResult),
) -> Vec<RunResult> {
    run_jobs(
        scenarios,
        jobs_list,
        parallelism(jobs),
        Histories::Drop,
        runner(),
        on_done,
    )
}

fn check_determinism(paths: &[PathBuf], seeds: &Seeds, jobs: Option<usize>) -> anyhow::Result<ExitCode> {
    let scenarios = match load(paths) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let jobs_list = all_jobs(&scenarios, seeds, 2);
    let bar = progress(jobs_list.len(), "runs");
    let results = sweep(&scenarios, &jobs_list, jobs, &mut |_, _| bar.inc(1));
    bar.finish_and_clear();
    let commit = commit();
    let mut differ = 0;
    for (pair, runs) in jobs_list.chunks(2).zip(results.chunks(2)) {
        let (job, a, b) = (pair[0], &runs[0], &runs[1]);
        let diffs = differences(a, b);
        if !diffs.is_empty() {
            differ += 1;
            let path = paths[job.scenario].display().to_string();
            outln!(
                "{}: seed {}: NOT deterministic: {}",
                scenarios[job.scenario].name,
                job.seed,
                diffs.join("; ")
            );
            outln!("{}", replay_line(&path, job.seed, &commit));
        }
    }
    let pairs = jobs_list.len() / 2;
    let errors = results.iter().filter(|r| r.error.is_some()).count();
    if errors > 0 {
        outln!("note: {errors} run(s) errored (identically in both runs unless reported above)");
    }
    if errors == results.len() {
        outln!("every run errored: nothing was compared");
        return Ok(ExitCode::from(1));
    }
    // A hash of 0 is no hash: FNV-1a over no events is its offset basis, not 0.
    let unhashed = results
        .iter()
        .filter(|r| r.error.is_none() && r.trace_hash == 0)
        .count();
    if unhashed > 0 {
        outln!("{unhashed} run(s) have no trace hash: the trace was not captured, nothing was compared");
        return Ok(ExitCode::from(1));
    }
    if differ > 0 {
        outln!("{differ} of {pairs} seed(s) replayed differently");
        return Ok(ExitCode::from(1));
    }
    outln!("all {pairs} seed(s) replayed identically (same trace hash, report and faults)");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod allocator_tests {
    use std::alloc::Layout;

    /// Sizes that are and are not multiples of the alignment (hashbrown's tables, for one, ask
    /// 16-byte alignment for sizes that are not).
    fn sizes() -> impl Iterator<Item = usize> {
        (1..=300).chain([1_000, 4_095, 4_097, 70_000, 300_001])
    }

    #[test]
    #[allow(unsafe_code)]
    fn every_block_meets_its_layouts_alignment_and_keeps_its_bytes() {
        let mut checked = 0;
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in sizes() {
                let layout = Layout::from_size_align(size, align).expect("valid layout");
                // SAFETY: `layout` has a non-zero size; every block is freed once with the
                // layout it has, after its bytes are written and read within its size.
                unsafe {
                    let p = std::alloc::alloc(layout);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "alloc {size} align {align}"
                    );
                    for i in 0..size {
                        *p.add(i) = (i % 251) as u8;
                    }
                    let grown = size * 3 + 5;
                    let q = std::alloc::realloc(p, layout, grown);
                    assert!(
                        !q.is_null() && (q as usize).is_multiple_of(align),
                        "realloc {size} -> {grown} align {align}"
                    );
                    assert!(
                        (0..size).all(|i| *q.add(i) == (i % 251) as u8),
                        "bytes kept: {size} align {align}"
                    );
                    std::alloc::dealloc(q, Layout::from_size_align(grown, align).expect("valid layout"));
                    let z = std::alloc::alloc_zeroed(layout);
                    assert!(
                        !z.is_null() && (z as usize).is_multiple_of(align),
                        "alloc_zeroed {size} align {align}"
                    );
                    assert!((0..size).all(|i| *z.add(i) == 0), "zeroed: {size} align {align}");
                    std::alloc::dealloc(z, layout);
                }
                checked += 1;
            }
        }
        println!("{checked} layouts checked through alloc, realloc, alloc_zeroed and dealloc");
    }
}
