//! `gregor-sim shrink`, and picking a (scenario, seed) from the command line or a corpus entry
//! (`--from-corpus FILE --index N`), for `shrink` and `replay`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use gregor_sim::cli::corpus;
use gregor_sim::scenario::Scenario;
use gregor_sim::shrink::{failure_of, shrink, ShrinkError, ShrinkOptions};

/// Where a seed to replay or shrink comes from, besides SCENARIO --seed S.
#[derive(clap::Args, Debug)]
pub struct FromCorpus {
    /// Takes the scenario and seed from this campaign corpus file instead.
    #[arg(long)]
    pub from_corpus: Option<PathBuf>,
    /// Which entry of the corpus (from 0).
    #[arg(long, default_value_t = 0, requires = "from_corpus")]
    pub index: usize,
}

/// The scenario file and seed to use: SCENARIO with --seed (or the seed the scenario pins), or
/// a corpus entry, whose commit is compared with this binary's.
pub fn target(scenario: Option<PathBuf>, seed: Option<u64>, from: &FromCorpus) -> anyhow::Result<(PathBuf, u64)> {
    let (path, seed) = match (&from.from_corpus, scenario) {
        (Some(file), None) => {
            let entry = corpus::pick(file, from.index).map_err(anyhow::Error::msg)?;
            let commit = super::commit();
            match corpus::commit_warning(&entry, &commit) {
                Some(warning) => eprintln!("{warning}"),
                None => eprintln!("corpus entry {} from commit {commit}, as this binary", from.index),
            }
            (PathBuf::from(entry.scenario), seed.unwrap_or(entry.seed))
        }
        (Some(_), Some(_)) => bail!("give a scenario file or --from-corpus, not both"),
        (None, Some(path)) => {
            let pinned = Scenario::load(&path).map_err(anyhow::Error::msg)?.seed;
            match seed.or(pinned) {
                Some(seed) => (path, seed),
                None => bail!("{}: which seed? (--seed S; the scenario pins none)", path.display()),
            }
        }
        (None, None) => bail!("which scenario? (a file with --seed, or --from-corpus FILE)"),
    };
    Ok((path, seed))
}

#[derive(clap::Args, Debug)]
pub struct ShrinkArgs {
    /// The scenario file (or --from-corpus).
    pub scenario: Option<PathBuf>,
    /// The failing seed (default: the one the scenario pins, or the corpus entry's).
    #[arg(long)]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub from: FromCorpus,
    /// Where to write the shrunk scenario (default: NAME.seed-S.shrunk.toml here).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Candidate runs at most.
    #[arg(long, default_value_t = 300)]
    pub candidates_max: usize,
    /// Wall time at most (90s, 10m, 1h).
    #[arg(long, default_value = "10m")]
    pub time_max: String,
    /// Candidates run at once (default: the number of CPUs).
    #[arg(long, short)]
    pub jobs: Option<usize>,
}

pub fn run(args: ShrinkArgs) -> anyhow::Result<ExitCode> {
    let time_max = gregor_sim::cli::campaign::parse_budget(&args.time_max)
        .map_err(anyhow::Error::msg)
        .context("--time-max")?;
    let (path, seed) = target(args.scenario, args.seed, &args.from)?;
    let scenario = Scenario::load(&path).map_err(anyhow::Error::msg)?;
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from(format!("{}.seed-{seed}.shrunk.toml", scenario.name)));
    let commit = super::commit();
    let options = ShrinkOptions {
        seed,
        candidates_max: args.candidates_max,
        wall_ms_max: time_max.as_millis() as u64,
        jobs: super::parallelism(args.jobs),
        header: format!(
            "# Shrunk by `gregor-sim shrink {} --seed {seed}`\n\
             # at commit {commit}: the faults the nemesis played, cut down by delta debugging, with\n\
             # the seed pinned. Replay it with `gregor-sim replay {}`.\n",
            path.display(),
            out.display()
        ),
    };
    let shrunk = match shrink(&scenario, super::runner(), &options, &mut |line| eprintln!("{line}")) {
        Ok(s) => s,
        Err(e @ (ShrinkError::DoesNotFail { .. } | ShrinkError::NotReproduced { .. })) => {
            outln!("gregor-sim shrink: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let sizes = format!(
        "# Before: {} (original run, {})\n# After:  {} ({} candidates{})\n",
        shrunk.before,
        scenario
            .faults
            .profile
            .as_deref()
            .map_or_else(|| "explicit schedule".to_string(), |p| format!("profile {p:?}")),
        shrunk.after,
        shrunk.candidates,
        if shrunk.bounded { ", stopped by a bound" } else { "" }
    );
    let text = format!("{}{sizes}{}", options.header, &shrunk.toml[options.header.len()..]);
    std::fs::write(&out, &text).with_context(|| format!("writing {}", out.display()))?;
    outln!("fails with:  {}", shrunk.failure);
    outln!("before:      {}", shrunk.before);
    outln!(
        "recorded:    {} (the played faults as a schedule: {})",
        shrunk.recorded,
        if shrunk.recorded_same_trace {
            "same trace hash as the original"
        } else {
            "another trace, the same failure"
        }
    );
    outln!("after:       {}", shrunk.after);
    outln!(
        "{} candidate runs{}",
        shrunk.candidates,
        if shrunk.bounded {
            " (stopped by --candidates-max or --time-max: smaller may exist)"
        } else {
            ""
        }
    );
    verify(&out, &shrunk.failure)?;
    outln!(
        "written to {}\n{}",
        out.display(),
        gregor_sim::cli::replay_line(&out.display().to_string(), seed, &commit)
    );
    Ok(ExitCode::SUCCESS)
}

/// Loads the written file back and runs it once: it must fail the same way on its own.
fn verify(out: &Path, failure: &gregor_sim::shrink::Failure) -> anyhow::Result<()> {
    let written = Scenario::load(out).map_err(anyhow::Error::msg)?;
    let seed = written.seed.context("the shrunk scenario pins its seed")?;
    let options = gregor_sim::cli::RunOptions {
        seed,
        ..Default::default()
    };
    let result = gregor_sim::cli::exec::run_one(super::runner(), &written, &options);
    match failure_of(&written, &result) {
        Some(f) if f == *failure => {
            outln!("replayed from the file: fails with {f} on its own");
            Ok(())
        }
        other => bail!("the written scenario does not fail with {failure} on its own: {other:?}"),
    }
}
