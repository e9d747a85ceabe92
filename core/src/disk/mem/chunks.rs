//! `Chunks`: a file's bytes in fixed-size blocks, so a growing file is never copied.
//!
//! Why: a `Vec<u8>` doubles as a segment grows, and each doubling copies all it holds: a loaded
//! simulated seed spent ~0.9% of its instructions copying segment files (222 growths), and held
//! up to twice each file's size. Here the first block grows like a vector up to [`CHUNK`] bytes
//! (small files stay small), and every later block is allocated at [`CHUNK`] bytes once.

/// Bytes per block. A fetch reads up to ~1 MiB, so most reads stay within one block or two.
pub(super) const CHUNK: usize = 64 * 1024;

#[derive(Clone, Debug, Default)]
pub(super) struct Chunks {
    /// Every block but the last holds exactly `CHUNK` bytes; none is empty.
    blocks: Vec<Vec<u8>>,
    len: usize,
}

impl Chunks {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn extend_from_slice(&mut self, mut data: &[u8]) {
        self.len += data.len();
        while !data.is_empty() {
            let last = match self.blocks.last_mut() {
                Some(last) if last.len() < CHUNK => last,
                full_or_none => {
                    // The first block starts small; later ones are whole from the start.
                    let capacity = if full_or_none.is_none() { 0 } else { CHUNK };
                    self.blocks.push(Vec::with_capacity(capacity));
                    self.blocks.last_mut().expect("pushed above")
                }
            };
            let take = data.len().min(CHUNK - last.len());
            if last.capacity() - last.len() < take {
                // The first block doubles, but never past a block's size.
                let want = (last.len() + take).max(2 * last.capacity()).min(CHUNK);
                last.reserve_exact(want - last.len());
            }
            last.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
    }

    /// Shortens to `len` bytes; no-op when already shorter.
    pub(super) fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        let blocks = len.div_ceil(CHUNK);
        self.blocks.truncate(blocks);
        if let Some(last) = self.blocks.last_mut() {
            last.truncate(len - (blocks - 1) * CHUNK);
        }
        self.len = len;
    }

    /// The pieces of `start..end`, block by block: (block, range within it, offset from
    /// `start`). Every block but the last is whole, so they follow from the positions alone; the
    /// caller checks `end <= len`.
    fn spans(start: usize, end: usize) -> impl Iterator<Item = (usize, std::ops::Range<usize>, usize)> {
        let mut pos = start;
        std::iter::from_fn(move || {
            (pos < end).then(|| {
                let from = pos % CHUNK;
                let to = (from + (end - pos)).min(CHUNK);
                let span = (pos / CHUNK, from..to, pos - start);
                pos += to - from;
                span
            })
        })
    }

    /// Copies `buf.len()` bytes from `pos` into `buf`; `None` when that runs past the end.
    pub(super) fn read(&self, pos: usize, buf: &mut [u8]) -> Option<()> {
        let end = pos.checked_add(buf.len()).filter(|&end| end <= self.len)?;
        // Most reads (a batch header, an index entry) lie within one block.
        let from = pos % CHUNK;
        if let Some(within) = self.blocks.get(pos / CHUNK).and_then(|b| b.get(from..from + buf.len())) {
            buf.copy_from_slice(within);
            return Some(());
        }
        for (block, range, at) in Self::spans(pos, end) {
            buf[at..at + range.len()].copy_from_slice(&self.blocks[block][range]);
        }
        Some(())
    }

    /// The bytes of `start..end` in one vector; `None` when that runs past the end. Copied
    /// straight from the blocks: no zeroed buffer first (a fetch's answer is such a vector, and
    /// zeroing it cost a memset of every byte served).
    pub(super) fn to_vec(&self, start: usize, end: usize) -> Option<Vec<u8>> {
        if end < start || end > self.len {
            return None;
        }
        let mut out = Vec::with_capacity(end - start);
        for (block, range, _) in Self::spans(start, end) {
            out.extend_from_slice(&self.blocks[block][range]);
        }
        Some(out)
    }

    pub(super) fn byte_mut(&mut self, pos: usize) -> Option<&mut u8> {
        if pos >= self.len {
            return None;
        }
        self.blocks[pos / CHUNK].get_mut(pos % CHUNK)
    }

    /// Overwrites bytes from `pos` in place, growing nothing; `None` when that runs past the end.
    pub(super) fn overwrite(&mut self, pos: usize, bytes: &[u8]) -> Option<()> {
        let end = pos.checked_add(bytes.len()).filter(|&end| end <= self.len)?;
        for (block, range, at) in Self::spans(pos, end) {
            let n = range.len();
            self.blocks[block][range].copy_from_slice(&bytes[at..at + n]);
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random appends, truncations, reads and overwrites, checked against a plain vector: the
    /// operations land across block boundaries, at the very ends, and past them.
    #[test]
    fn behaves_as_a_plain_vector_across_block_boundaries() {
        let mut draws = crate::seeded::Draws::new(7);
        let mut rand = move |below: usize| draws.below(below as u64) as usize;
        let mut chunks = Chunks::default();
        let mut model: Vec<u8> = Vec::new();
        let mut crossings = 0;
        for step in 0..3_000 {
            match rand(10) {
                0..=4 => {
                    let n = [0, 1, 17, CHUNK - 1, CHUNK, CHUNK + 3][rand(6)].min(rand(3 * CHUNK) + 1);
                    let data: Vec<u8> = (0..n).map(|i| (step + i) as u8).collect();
                    chunks.extend_from_slice(&data);
                    model.extend_from_slice(&data);
                }
                5 => {
                    let len = rand(model.len() + 2);
                    chunks.truncate(len);
                    model.truncate(len);
                }
                6 | 7 => {
                    let pos = rand(model.len() + 2);
                    let n = rand(2 * CHUNK);
                    let mut buf = vec![0xAA; n];
                    let got = chunks.read(pos, &mut buf);
                    match model.get(pos..pos + n) {
                        Some(want) => {
                            assert_eq!(got, Some(()), "step {step}: read {pos}+{n} of {}", model.len());
                            assert_eq!(buf, want, "step {step}: read {pos}+{n}");
                            crossings += usize::from(pos / CHUNK != (pos + n).saturating_sub(1) / CHUNK);
                        }
                        None => assert_eq!(got, None, "step {step}: read {pos}+{n} past {}", model.len()),
                    }
                    // The same range as one vector; a reversed one is refused too.
                    assert_eq!(
                        chunks.to_vec(pos, pos + n),
                        model.get(pos..pos + n).map(<[u8]>::to_vec),
                        "step {step}: to_vec {pos}..{}",
                        pos + n
                    );
                    assert_eq!(chunks.to_vec(pos + 1, pos), None, "step {step}: reversed range");
                }
                8 => {
                    let pos = rand(model.len() + 2);
                    let bytes = vec![step as u8 ^ 0x5A; rand(CHUNK + 10)];
                    let got = chunks.overwrite(pos, &bytes);
                    match model.get_mut(pos..pos + bytes.len()) {
                        Some(place) => {
                            assert_eq!(got, Some(()), "step {step}: overwrite {pos}");
                            place.copy_from_slice(&bytes);
                        }
                        None => assert_eq!(got, None, "step {step}: overwrite {pos} past the end"),
                    }
                }
                _ => {
                    let pos = rand(model.len() + 2);
                    match (chunks.byte_mut(pos), model.get_mut(pos)) {
                        (Some(a), Some(b)) => {
                            *a ^= 0xFF;
                            *b ^= 0xFF;
                        }
                        (None, None) => {}
                        (a, b) => panic!("step {step}: byte {pos}: {a:?} vs {b:?}"),
                    }
                }
            }
            assert_eq!(chunks.len(), model.len(), "step {step}: length");
            if model.len() > 4 * CHUNK {
                chunks.truncate(CHUNK + 5);
                model.truncate(CHUNK + 5);
            }
        }
        assert_eq!(
            chunks.to_vec(0, model.len()),
            Some(model.clone()),
            "whole file at the end"
        );
        assert!(crossings > 50, "only {crossings} reads crossed a block boundary");
    }

    #[test]
    fn later_blocks_are_allocated_whole_and_the_first_grows() {
        let mut chunks = Chunks::default();
        chunks.extend_from_slice(b"abc");
        assert!(chunks.blocks[0].capacity() < CHUNK, "a small file took a whole block");
        chunks.extend_from_slice(&vec![1; CHUNK]);
        assert_eq!(chunks.blocks.len(), 2);
        assert_eq!(chunks.blocks[1].capacity(), CHUNK);
        assert_eq!(chunks.blocks[1].len(), 3);
    }
}
