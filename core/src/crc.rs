//! CRC-32C (Castagnoli): the checksum of Kafka's record batches, and of Gregor's offset index,
//! consensus state and consensus log entries.
//!
//! Why not `crc32c::crc32c` for every input: a record batch of one small record is ~80 bytes to
//! checksum, and a benchmark seed checksums ~150,000 of them (the leader, both followers and the
//! consumer each check every batch). The crate spends ~170 instructions on 80 bytes: bytes one
//! at a time up to an 8-byte boundary and after the last one, and two empty passes of its 3-way
//! parallel loop, for ten `crc32` instructions of work. Below the size at which that parallel
//! loop starts (3 x 256 bytes) it computes the same chain of 8-byte steps as the loop here, which
//! reads them unaligned (free on x86-64) and ends with 4-, 2- and 1-byte steps. Longer inputs,
//! and CPUs without SSE 4.2, take the crate's code.
//!
//! Contract: [`crc32c`] equals `crc32c::crc32c` on every input (the tests compare every length
//! from 0 to past the crate's parallel size, at every alignment).

/// Inputs shorter than this take the short path: the crate's 3-way parallel loop (blocks of
/// 3 x 256 bytes) starts here.
#[cfg(target_arch = "x86_64")]
const SHORT: usize = 3 * 256;

/// The CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < SHORT && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: `short_sse42` needs SSE 4.2 and nothing else; the CPU has it (checked above).
        #[allow(unsafe_code)]
        return unsafe { short_sse42(data) };
    }
    ::crc32c::crc32c(data)
}

/// CRC-32C with the SSE 4.2 `crc32` instruction, 8 bytes a step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn short_sse42(data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut words = data.chunks_exact(8);
    let mut crc = u64::from(u32::MAX);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(b));
    }
    // `_mm_crc32_u64` leaves the upper 32 bits zero.
    let mut crc = crc as u32;
    let mut rest = words.remainder();
    if let Some((w, tail)) = rest.split_first_chunk::<4>() {
        crc = _mm_crc32_u32(crc, u32::from_le_bytes(*w));
        rest = tail;
    }
    if let Some((w, tail)) = rest.split_first_chunk::<2>() {
        crc = _mm_crc32_u16(crc, u16::from_le_bytes(*w));
        rest = tail;
    }
    if let Some(&b) = rest.first() {
        crc = _mm_crc32_u8(crc, b);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check value of CRC-32C (RFC 3720, and every CRC catalogue): the CRC of "123456789".
    #[test]
    fn the_catalogue_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    /// Every length from 0 to past the crate's parallel size, at each of 8 alignments, over
    /// bytes from a fixed generator: the same CRC as the crate's.
    #[test]
    fn equals_the_crate_on_every_length_and_alignment() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let bytes: Vec<u8> = (0..1100)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let mut compared = 0;
        for start in 0..8 {
            for len in 0..=bytes.len() - 8 {
                let data = &bytes[start..start + len];
                assert_eq!(crc32c(data), ::crc32c::crc32c(data), "length {len} at offset {start}");
                compared += 1;
            }
        }
        assert_eq!(compared, 8 * 1093);
    }
}
