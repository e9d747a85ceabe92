//! Seed lists as the command line writes them: `0..100` (end excluded), `5`, `1,2,3`, or a
//! comma-separated mix (`0..10,42`). Duplicates are dropped, the first occurrence keeps its
//! place; at most [`SEEDS_MAX`] seeds, so a typo cannot queue a billion runs.

use std::str::FromStr;

/// The most seeds one list may hold.
pub const SEEDS_MAX: u64 = 1_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seeds(pub Vec<u64>);

fn number(s: &str) -> Result<u64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{:?} is not a seed (a number from 0 to {})", s.trim(), u64::MAX))
}

impl FromStr for Seeds {
    type Err = String;

    fn from_str(s: &str) -> Result<Seeds, String> {
        let mut seeds = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut push = |seed: u64, seeds: &mut Vec<u64>| {
            if seen.insert(seed) {
                seeds.push(seed);
            }
        };
        for item in s.split(',') {
            if item.trim().is_empty() {
                return Err(format!("{s:?}: an empty item (write 0..100, 5 or 1,2,3)"));
            }
            if let Some((start, end)) = item.split_once("..") {
                let (start, end) = (number(start)?, number(end)?);
                if end <= start {
                    return Err(format!("{:?} is empty: the end is excluded", item.trim()));
                }
                if end - start > SEEDS_MAX {
                    return Err(format!("{:?} holds more than {SEEDS_MAX} seeds", item.trim()));
                }
                for seed in start..end {
                    push(seed, &mut seeds);
                }
            } else {
                push(number(item)?, &mut seeds);
            }
            if seeds.len() as u64 > SEEDS_MAX {
                return Err(format!("{s:?} holds more than {SEEDS_MAX} seeds"));
            }
        }
        Ok(Seeds(seeds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(s: &str) -> Vec<u64> {
        s.parse::<Seeds>().expect("parses").0
    }

    #[test]
    fn ranges_single_seeds_and_lists() {
        assert_eq!(seeds("0..4"), vec![0, 1, 2, 3]);
        assert_eq!(seeds("5"), vec![5]);
        assert_eq!(seeds("1,2,3"), vec![1, 2, 3]);
        assert_eq!(seeds("7, 0..2 ,1,9"), vec![7, 0, 1, 9]);
        assert_eq!(seeds("18446744073709551615"), vec![u64::MAX]);
    }

    #[test]
    fn bad_lists_say_why() {
        for (bad, why) in [
            ("", "empty item"),
            ("1,,2", "empty item"),
            ("5..5", "is empty"),
            ("9..3", "is empty"),
            ("x", "not a seed"),
            ("-1", "not a seed"),
            ("0..", "not a seed"),
            ("0..2000000", "more than"),
            ("0..600000,600000..1200000", "more than"),
        ] {
            let e = bad.parse::<Seeds>().expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
