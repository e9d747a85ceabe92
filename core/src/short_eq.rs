//! String equality without a `memcmp` call for short strings.
//!
//! Lookups by name (a topic among a broker's topics, a broker's address among a client's
//! connections) compare a few strings of 5-20 bytes each. `a == b` on `str` compares the lengths
//! and then calls `memcmp`, whose call and dispatch cost more than the compare itself: ~20
//! instructions for a 6-byte name. Up to 16 bytes, two overlapping loads from each side do it.

/// `a == b`.
#[inline]
pub fn same(a: &str, b: &str) -> bool {
    same_bytes(a.as_bytes(), b.as_bytes())
}

/// `a == b`.
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => {
            let word = |s: &[u8], at: usize| u32::from_le_bytes(bytes_at(s, at));
            (word(a, 0) ^ word(b, 0)) | (word(a, n - 4) ^ word(b, n - 4)) == 0
        }
        8..=16 => {
            let word = |s: &[u8], at: usize| u64::from_le_bytes(bytes_at(s, at));
            (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0
        }
        _ => a == b,
    }
}

/// `N` bytes of `s` from `at`: one load, where an array built from `s[at]`, `s[at + 1]`, ...
/// was a load and a shift a byte.
#[inline]
fn bytes_at<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    let mut w = [0; N];
    w.copy_from_slice(&s[at..at + N]);
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against `==` on every pair of lengths 0..40 and a difference at every position.
    #[test]
    fn equals_the_standard_compare_at_every_length_and_position() {
        let mut compared = 0;
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..40 {
            let a = &base[..n];
            for m in 0..40 {
                let b = &base[..m];
                assert_eq!(same_bytes(a, b), a == b, "lengths {n} and {m}");
                compared += 1;
            }
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same_bytes(a, &b), "length {n}, differing at {at}");
                assert!(same_bytes(&b, &b.clone()));
                compared += 2;
            }
        }
        assert!(same("events", "events") && !same("events", "evento") && !same("event", "events"));
        println!("compared {compared} pairs");
    }
}
