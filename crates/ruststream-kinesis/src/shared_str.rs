//! [`SharedStr`]: a record's sequence number and partition key, as a part of one string that
//! every record of a fetch shares. A shard's reader takes a `GetRecords` answer apart into as
//! many records as it brought, and each record used to make two shared strings of its own (an
//! allocation and a copy each, and their release when the record settled); one string for the
//! whole fetch costs one string and its count, and a record's part of it a count.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A string shared by the records of one fetch: its sequence numbers and partition keys, one
/// after the other, of which this is one. It reads as a `str` (`Deref`), and cloning it counts a
/// reference, as cloning an `Arc<str>` does.
///
/// A `SharedStr` keeps its whole fetch's string alive: a few dozen bytes for each record of the
/// fetch (up to 10,000 records, with partition keys of up to 256 bytes). Keep
/// [`detached`](Self::detached) or `to_string()` of it, not the `SharedStr`, where a handler
/// stores it for long (a set of sequence numbers seen, a position to seek back to).
///
/// # Panics
///
/// Made from a text of 4 GiB or more.
///
/// # Examples
///
/// ```
/// use ruststream_kinesis::SharedStr;
///
/// let sequence = SharedStr::from("49590338271490256608559692538361571095921575989136588898");
/// assert_eq!(&*sequence, "49590338271490256608559692538361571095921575989136588898");
/// assert!(sequence.starts_with("4959"));
/// assert_eq!(sequence, "49590338271490256608559692538361571095921575989136588898");
/// ```
#[derive(Clone)]
pub struct SharedStr {
    // An `Arc<String>`, not an `Arc<str>`: sharing a gathered `String` then moves it rather than
    // copying its text, and the pointer is one word, not two (16 bytes a `SharedStr`, not 24).
    whole: Arc<String>,
    // `u32`, not `usize`: the record that carries two of these is moved on every delivery, and
    // a fetch's texts stay far below 4 GiB (10 MiB of records at most).
    start: u32,
    end: u32,
}

impl SharedStr {
    /// The part `start..end` (byte offsets on char boundaries) of `whole`.
    fn part(whole: &Arc<String>, (start, end): Span) -> Self {
        debug_assert!(whole.is_char_boundary(start) && whole.is_char_boundary(end));
        Self {
            whole: Arc::clone(whole),
            start: offset(start),
            end: offset(end),
        }
    }

    /// This text in a string of its own when it is a part of a larger one (a copy: the text
    /// and its count, two allocations), else a clone: what a holder that keeps it for long
    /// keeps, so that it does not keep the rest.
    ///
    /// # Examples
    ///
    /// ```
    /// use ruststream_kinesis::SharedStr;
    ///
    /// let kept = SharedStr::from("4711").detached();
    /// assert_eq!(kept, "4711");
    /// ```
    #[must_use]
    pub fn detached(&self) -> Self {
        if self.start == 0 && self.end as usize == self.whole.len() {
            self.clone()
        } else {
            Self::from(self.as_str())
        }
    }

    /// This text as a holder that may keep it for long keeps it: [`detached`](Self::detached)
    /// when it is a part of a string of more than [`KEPT_WHOLE`] bytes, else as it is (what
    /// it keeps of the rest is less than a copy would cost: a few records' texts).
    pub(crate) fn to_keep(&self) -> Self {
        if self.whole.len() > KEPT_WHOLE {
            self.detached()
        } else {
            self.clone()
        }
    }

    /// Whether `other` is a part of the same string as this one.
    #[cfg(test)]
    pub(crate) fn shares_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.whole, &other.whole)
    }

    /// The text as a `str`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.whole[self.start as usize..self.end as usize]
    }
}

impl Deref for SharedStr {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SharedStr {}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for SharedStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Default for SharedStr {
    fn default() -> Self {
        Self::from("")
    }
}

impl From<String> for SharedStr {
    /// All of `text`, moved, not copied (its spare capacity let go).
    fn from(mut text: String) -> Self {
        text.shrink_to_fit();
        let end = offset(text.len());
        Self {
            whole: Arc::new(text),
            start: 0,
            end,
        }
    }
}

impl From<&str> for SharedStr {
    fn from(text: &str) -> Self {
        Self::from(text.to_owned())
    }
}

impl From<Arc<str>> for SharedStr {
    /// All of `text`, copied into a string of its own.
    fn from(text: Arc<str>) -> Self {
        Self::from(&*text)
    }
}

impl From<SharedStr> for String {
    fn from(text: SharedStr) -> Self {
        text.as_str().to_owned()
    }
}

/// The longest string a part kept for long keeps whole ([`SharedStr::to_keep`]): a fetch of
/// a few dozen records, or 64 sequence numbers written in process.
const KEPT_WHOLE: usize = 4096;

/// `at` as a stored offset.
///
/// # Panics
///
/// At 4 GiB or more: no fetch comes near it (10 MiB of records at most), and a text cut there
/// would read as another one.
fn offset(at: usize) -> u32 {
    u32::try_from(at).expect("a SharedStr's text is shorter than 4 GiB")
}

/// Where a text lies in the string being gathered: its byte offsets.
pub(crate) type Span = (usize, usize);

/// The texts of one fetch, gathered into one string: [`push`](Self::push) each, then
/// [`share`](Self::share) them all at once and take each part by its span.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    text: String,
}

impl Gathered {
    /// Room for `bytes` of text.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        Self {
            text: String::with_capacity(bytes),
        }
    }

    /// Adds `text`; answers where it lies.
    pub(crate) fn push(&mut self, text: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(text);
        (start, self.text.len())
    }

    /// The gathered string, shared (moved, not copied): [`Shared::part`] takes each text out
    /// of it.
    pub(crate) fn share(self) -> Shared {
        Shared(Arc::new(self.text))
    }
}

/// The texts of one fetch in one shared string.
#[derive(Debug)]
pub(crate) struct Shared(Arc<String>);

impl Shared {
    /// The text that lies at `span`.
    pub(crate) fn part(&self, span: Span) -> SharedStr {
        SharedStr::part(&self.0, span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_texts_of_a_fetch_share_one_string_and_read_as_their_own() {
        let mut gathered = Gathered::with_capacity(16);
        let sequence = gathered.push("4711");
        let key = gathered.push("order-ü");
        let empty = gathered.push("");
        let shared = gathered.share();
        let (sequence, key, empty) = (shared.part(sequence), shared.part(key), shared.part(empty));
        assert_eq!(sequence, "4711");
        assert_eq!(&*key, "order-ü");
        assert_eq!(empty, "");
        assert!(
            Arc::ptr_eq(&sequence.whole, &key.whole),
            "one string for the fetch"
        );
        assert_eq!(
            key,
            SharedStr::from("order-ü"),
            "compared by text, not by place"
        );
        assert!(sequence < key);
        assert_eq!(format!("{sequence} {key:?}"), "4711 \"order-ü\"");
        assert_eq!(String::from(key.clone()), "order-ü");
        // Detached, a part keeps a string of its own; a whole one is only counted again.
        let kept = key.detached();
        assert_eq!(kept, key);
        assert!(!Arc::ptr_eq(&kept.whole, &key.whole));
        assert!(Arc::ptr_eq(&kept.detached().whole, &kept.whole));
    }

    #[test]
    fn a_part_kept_for_long_keeps_a_small_string_whole_and_copies_out_of_a_large_one() {
        let mut small = Gathered::with_capacity(16);
        let (sequence, _key) = (small.push("4711"), small.push("order-1"));
        let sequence = small.share().part(sequence);
        assert!(
            sequence.to_keep().shares_with(&sequence),
            "a few records' texts: kept whole"
        );
        let mut large = Gathered::with_capacity(KEPT_WHOLE + 8);
        let sequence_span = large.push("4711");
        large.push(&"k".repeat(KEPT_WHOLE));
        let sequence = large.share().part(sequence_span);
        let kept = sequence.to_keep();
        assert_eq!(kept, "4711");
        assert!(
            !kept.shares_with(&sequence),
            "a large fetch's string is let go"
        );
    }
}
