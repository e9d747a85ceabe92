//! `gregor perf`: placeholder until the load tool lands.
