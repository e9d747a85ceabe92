//! `gregor-sim campaign`: the safe scenarios (`outcome = "no-anomalies"`, no pinned seed) with
//! fresh seeds until the budget is spent; failing seeds go to the corpus file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use gregor_sim::cli::campaign::{parse_budget, run_campaign};
use gregor_sim::cli::corpus::{self, Entry};
use gregor_sim::cli::verdict::{seed_status, SeedStatus};
use gregor_sim::scenario::{Outcome, Scenario};

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
}

/// Every *.toml under `dir`, sorted, at most 4 directories deep.
fn scenario_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() && depth < 4 {
            scenario_files(&path, depth + 1, out)?;
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
    Ok(())
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
    let (safe, paths): (Vec<Scenario>, Vec<PathBuf>) = all
        .into_iter()
        .zip(files)
        .filter(|(s, _)| s.expect.get_ref().outcome == Outcome::NoAnomalies && s.seed.is_none())
        .unzip();
    anyhow::ensure!(
        !safe.is_empty(),
        "no safe scenario (outcome = \"no-anomalies\") under {}",
        args.scenarios.display()
    );
    let campaign_seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let jobs = super::parallelism(args.jobs);
    let commit = super::commit();
    println!(
        "campaign seed {campaign_seed} (repeat: --seed {campaign_seed}), commit {commit}, {} safe scenario(s), budget {} s, {jobs} job(s), corpus {}",
        safe.len(),
        budget.as_secs(),
        args.corpus.display()
    );
    let bar = super::progress(budget.as_secs() as usize, "s");
    let mut per_scenario = vec![(0usize, 0u64, 0usize); safe.len()];
    let mut failures = Vec::new();
    let started = std::time::Instant::now();
    let (runs, wall) = run_campaign(
        &safe,
        campaign_seed,
        budget,
        jobs,
        super::runner(),
        &mut |run, result| {
            let row = &mut per_scenario[run.scenario];
            row.0 += 1;
            row.1 += result.simulated_ms;
            if let SeedStatus::Fail(why) = seed_status(safe[run.scenario].expect.get_ref(), result) {
                row.2 += 1;
                let entry = Entry {
                    scenario: paths[run.scenario].display().to_string(),
                    seed: run.seed,
                    commit: commit.clone(),
                    why,
                };
                if let Err(e) = corpus::append(&args.corpus, &entry) {
                    eprintln!("cannot append to {}: {e}", args.corpus.display());
                }
                failures.push(entry);
                bar.set_message(format!("({} failing)", failures.len()));
            }
            bar.set_position(started.elapsed().as_secs().min(budget.as_secs()));
        },
    );
    bar.finish_and_clear();
    let simulated_ms: u64 = per_scenario.iter().map(|r| r.1).sum();
    println!("\n{:<80} {:>6} {:>8} {:>8}", "scenario", "seeds", "sim h", "failing");
    for ((scenario, (n, ms, failing)), _) in safe.iter().zip(&per_scenario).zip(&paths) {
        println!("{:<80} {n:>6} {:>8.2} {failing:>8}", scenario.name, *ms as f64 / 3.6e6);
    }
    println!(
        "\n{runs} seeds in {:.1} wall s: {:.2} seeds/s, {:.2} simulated hours ({:.0} simulated s per wall s), {} failing",
        wall.as_secs_f64(),
        runs as f64 / wall.as_secs_f64().max(1e-3),
        simulated_ms as f64 / 3.6e6,
        simulated_ms as f64 / 1000.0 / wall.as_secs_f64().max(1e-3),
        failures.len()
    );
    if runs == 0 {
        println!("no seed ran: nothing was checked");
        return Ok(ExitCode::from(1));
    }
    if failures.is_empty() {
        println!("campaign passed: no failing seed");
        return Ok(ExitCode::SUCCESS);
    }
    let first = corpus::load(&args.corpus).map_or(0, |all| all.len().saturating_sub(failures.len()));
    for (i, f) in failures.iter().enumerate() {
        println!("{}: seed {}: {}", f.scenario, f.seed, f.why);
        println!(
            "  gregor-sim replay --from-corpus {} --index {}  # commit {commit}",
            args.corpus.display(),
            first + i
        );
    }
    Ok(ExitCode::from(1))
}
