//! gregor-tests: suites that cross crates (real clients, processes); they grow with the issues.
