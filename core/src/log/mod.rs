//! The partition log (work in progress in this commit).
