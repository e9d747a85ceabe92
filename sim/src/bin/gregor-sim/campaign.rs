//! `gregor-sim campaign`: the safe scenarios (`outcome = "no-anomalies"`, no pinned seed, no
//! `known_failing`) with fresh seeds until the budget is spent; failing seeds go to the corpus
//! file. It prints seeds run, simulated hours, seeds/s, failures and the coverage table merged
//! over every seed (and writes them as Markdown with `--report FILE`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use gregor_sim::cli::campaign::{excluded_because, parse_budget, run_campaign, scenario_files, CampaignReport};
use gregor_sim::cli::corpus::{self, Entry};
use gregor_sim::cli::replay_line;
use gregor_sim::cli::verdict::{seed_status, SeedStatus};

#[derive(clap::Args, Debug)]
pub struct CampaignArgs {
    /// Wall time to spend (90s, 10m, 1h): no run starts after it.
    #[arg(long, default_value = "10m")]
    pub budget: String,
    /// Runs at once (default: the number of CPUs).
    #[arg(long, short)]
    pub jobs: Option<usize>,
    /// Where the scenarios are (searched recursively for *.toml).
    #[arg(long, default_value = "scenarios")]
    pub scenarios: PathBuf,
    /// The corpus file failing seeds are appended to.
    #[arg(long, default_value = "gregor-corpus.toml")]
    pub corpus: PathBuf,
    /// The campaign seed every run's seed derives from (default: from the clock, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also writes the report (command, commit, seeds, simulated hours, seeds/s, failures, the
    /// per-scenario and coverage tables) to this file, as Markdown.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

pub fn run(args: CampaignArgs) -> anyhow::Result<ExitCode> {
    let budget = parse_budget(&args.budget)
        .map_err(anyhow::Error::msg)
        .context("--budget")?;
    let mut files = Vec::new();
    scenario_files(&args.scenarios, 0, &mut files).with_context(|| format!("reading {}", args.scenarios.display()))?;
    let all = match super::load(&files) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let mut safe = Vec::new();
    let mut paths = Vec::new();
    let mut skipped = Vec::new();
    for (scenario, path) in all.into_iter().zip(files) {
        match excluded_because(&scenario) {
            None => {
                safe.push(scenario);
                paths.push(path);
            }
            Some(why) => skipped.push((path.display().to_string(), why)),
        }
    }
    anyhow::ensure!(
        !safe.is_empty(),
        "no safe scenario (outcome = \"no-anomalies\", no pinned seed, no known failing seeds) under {}",
        args.scenarios.display()
    );
    let campaign_seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let jobs = super::parallelism(args.jobs);
    let commit = super::commit();
    outln!(
        "campaign seed {campaign_seed} (repeat: --seed {campaign_seed}), commit {commit}, {} safe scenario(s), budget {} s, {jobs} job(s), corpus {}",
        safe.len(),
        budget.as_secs(),
        args.corpus.display()
    );
    let known_failing = skipped
        .iter()
        .filter(|(_, why)| why.starts_with("known failing"))
        .count();
    outln!(
        "left out: {} negative control(s) or pinned case(s), {known_failing} scenario(s) with known failing seeds",
        skipped.len() - known_failing
    );
    for (path, why) in skipped.iter().filter(|(_, why)| why.starts_with("known failing")) {
        outln!("  {path}: {why}");
    }
    let bar = super::progress(budget.as_secs() as usize, "s");
    let mut report = CampaignReport::new(&safe);
    let mut corpus_index = corpus::load(&args.corpus).map_or(0, |all| all.len());
    let mut replay_lines = Vec::new();
    let started = std::time::Instant::now();
    let (_, wall) = run_campaign(
        &safe,
        campaign_seed,
        budget,
        jobs,
        super::runner(),
        &mut |run, result| {
            let fail = match seed_status(safe[run.scenario].expect.get_ref(), result) {
                SeedStatus::Fail(why) => Some(why),
                SeedStatus::Pass | SeedStatus::Missed => None,
            };
            if let Some(why) = &fail {
                let entry = Entry {
                    scenario: paths[run.scenario].display().to_string(),
                    seed: run.seed,
                    commit: commit.clone(),
                    why: why.clone(),
                };
                match corpus::append(&args.corpus, &entry) {
                    Ok(()) => {
                        replay_lines.push(format!(
                            "{}: seed {}: {why}\n  gregor-sim replay --from-corpus {} --index {corpus_index}  # commit {commit}",
                            entry.scenario,
                            entry.seed,
                            args.corpus.display()
                        ));
                        corpus_index += 1;
                    }
                    Err(e) => {
                        eprintln!("cannot append to {}: {e}", args.corpus.display());
                        replay_lines.push(format!(
                            "{}: seed {}: {why}\n  {}",
                            entry.scenario,
                            entry.seed,
                            replay_line(&entry.scenario, entry.seed, &commit)
                        ));
                    }
                }
                bar.set_message(format!("({} failing)", replay_lines.len()));
            }
            report.add(run, result, fail);
            bar.set_position(started.elapsed().as_secs().min(budget.as_secs()));
        },
    );
    bar.finish_and_clear();
    report.wall = wall;
    print!("{}", report.text());
    if let Some(file) = &args.report {
        let command: Vec<String> = std::env::args().collect();
        let header = [
            ("command", format!("`{}`", command.join(" "))),
            ("commit", commit.clone()),
            ("campaign seed", campaign_seed.to_string()),
            ("budget", format!("{} s, {jobs} job(s)", budget.as_secs())),
            ("safe scenarios run", safe.len().to_string()),
        ];
        std::fs::write(file, report.markdown(&header, &skipped))
            .with_context(|| format!("cannot write {}", file.display()))?;
        outln!("report written to {}", file.display());
    }
    for line in &replay_lines {
        outln!("{line}");
    }
    match report.verdict() {
        Ok(()) => {
            outln!("campaign passed: no failing seed");
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => {
            outln!("campaign failed: {why}");
            Ok(ExitCode::from(1))
        }
    }
}
