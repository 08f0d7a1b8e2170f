//! Text helpers shared by the word-count job, its tests and benches.

mod splitmix;
pub use splitmix::SplitMix;

/// The words of `line`: maximal runs of Unicode alphanumeric characters,
/// lowercased, yielded one at a time (nothing is collected, so a huge line
/// costs one word at a time). `line` may be borrowed (`&str`) or owned (a
/// `String`, which a flat_map closure can hand over).
///
/// # Examples
/// ```
/// let words: Vec<String> = floe::tokenize("Hello, World! ÄÖ-42").collect();
/// assert_eq!(words, vec!["hello", "world", "äö", "42"]);
/// ```
pub fn tokenize<S: AsRef<str>>(line: S) -> Words<S> {
    Words { line, pos: 0 }
}

/// The iterator of [`tokenize`]: owns (or borrows) the line and a position.
#[derive(Clone, Debug)]
pub struct Words<S> {
    line: S,
    pos: usize,
}

impl<S: AsRef<str>> Iterator for Words<S> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let rest = &self.line.as_ref()[self.pos..];
        let mut start = None;
        for (i, c) in rest.char_indices() {
            if c.is_alphanumeric() {
                start.get_or_insert(i);
            } else if let Some(s) = start {
                self.pos += i + c.len_utf8();
                return Some(lowercase(&rest[s..i]));
            }
        }
        self.pos += rest.len();
        start.map(|s| lowercase(&rest[s..]))
    }
}

/// Calls `f` with each word of `line` (see [`tokenize`]).
pub fn for_each_word(line: &str, mut f: impl FnMut(String)) {
    let mut start = None;
    for (i, c) in line.char_indices() {
        if c.is_alphanumeric() {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            f(lowercase(&line[s..i]));
        }
    }
    if let Some(s) = start {
        f(lowercase(&line[s..]));
    }
}

fn lowercase(word: &str) -> String {
    if word
        .bytes()
        .all(|b| b.is_ascii() && !b.is_ascii_uppercase())
    {
        word.to_owned()
    } else {
        word.to_lowercase()
    }
}

/// The seeded word source of the generated word count: a vocabulary of distinct
/// lowercase words and a pick of word `i` that depends only on the seed and `i`,
/// so every parallelism generates the same multiset of words.
#[derive(Clone, Debug)]
pub struct WordGenerator {
    vocabulary: Vec<String>,
    seed: u64,
}

impl WordGenerator {
    /// A vocabulary of `size` distinct words (at least one), chosen by `seed`.
    pub fn new(size: usize, seed: u64) -> Self {
        let size = size.max(1);
        let mut seen = std::collections::HashSet::with_capacity(size);
        let mut vocabulary = Vec::with_capacity(size);
        let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
        while vocabulary.len() < size {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut r = floe_actors::keygroup::fmix64(state);
            let len = 3 + (r % 8) as usize;
            let mut w = String::with_capacity(len);
            for _ in 0..len {
                r = floe_actors::keygroup::fmix64(r.wrapping_add(0x632b_e59b_d9b4_e019));
                w.push((b'a' + (r % 26) as u8) as char);
            }
            if seen.insert(w.clone()) {
                vocabulary.push(w);
            }
        }
        WordGenerator { vocabulary, seed }
    }

    /// The vocabulary.
    pub fn vocabulary(&self) -> &[String] {
        &self.vocabulary
    }

    /// The index into the vocabulary of word number `i`.
    #[inline]
    pub fn index(&self, i: u64) -> usize {
        let r = floe_actors::keygroup::fmix64(self.seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        (r % self.vocabulary.len() as u64) as usize
    }

    /// Word number `i`, as an owned string.
    #[inline]
    pub fn word(&self, i: u64) -> String {
        self.vocabulary[self.index(i)].clone()
    }
}

/// MurmurHash3's 64-bit finaliser (`fmix64`, as the key groups use): a
/// well-mixed 64-bit function of `x` (for seeded, index-addressable
/// generators).
#[inline]
pub fn mix64(x: u64) -> u64 {
    floe_actors::keygroup::fmix64(x)
}
