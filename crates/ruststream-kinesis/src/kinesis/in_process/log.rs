//! What an in-process stream holds: its shards' records in write order, the bytes of the records
//! a test injects, and the partition keys those take; with the numbers Kinesis would give them
//! (shard ids, 56-digit sequence numbers, MD5 hash keys in equal ranges).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};

use super::tap::Tap;
use crate::SharedStr;
use crate::kinesis::api::FetchedRecord;
use crate::kinesis::envelope;
use crate::shared_str::{Gathered, Shared};

/// One record as a shard holds it.
#[derive(Debug)]
pub(super) struct Stored {
    pub(super) data: Bytes,
    pub(super) partition_key: SharedStr,
    pub(super) sequence: SharedStr,
    pub(super) arrived_ms: i64,
}

impl Stored {
    /// The record as `GetRecords` answers it: its bytes shared, not copied.
    pub(super) fn fetched(&self) -> FetchedRecord {
        FetchedRecord {
            data: self.data.clone(),
            partition_key: self.partition_key.clone(),
            sequence: self.sequence.clone(),
            arrived_ms: Some(self.arrived_ms),
        }
    }
}

/// One stream.
#[derive(Debug)]
pub(super) struct StreamLog {
    /// Each shard's records, in the order they were written (so in sequence order).
    pub(super) shards: Vec<Vec<Stored>>,
    /// Each shard's readers.
    pub(super) taps: Vec<Vec<Weak<Tap>>>,
    /// Each shard's news of a write, for its fan-out subscriptions.
    pub(super) news: Vec<Arc<tokio::sync::Notify>>,
    /// The stream's enhanced fan-out consumers.
    pub(super) consumers: std::collections::HashSet<String>,
    /// Where the records a test injects are written.
    pub(super) arena: Arena,
    /// The partition keys of injected records, [`INPUT_KEYS_PER_SHARD`] landing in each shard,
    /// with their hash keys; made at the stream's first inject.
    input_keys: Vec<Vec<(SharedStr, u128)>>,
    /// How many records a test injected.
    injected: usize,
}

/// How many partition keys of each shard injected records take in turn.
const INPUT_KEYS_PER_SHARD: usize = 32;

impl StreamLog {
    /// A stream of `shards` shards (at least one), with no record.
    pub(super) fn new(shards: u32) -> Self {
        Self {
            shards: (0..shards.max(1)).map(|_| Vec::new()).collect(),
            taps: (0..shards.max(1)).map(|_| Vec::new()).collect(),
            news: (0..shards.max(1)).map(|_| Arc::default()).collect(),
            consumers: std::collections::HashSet::new(),
            arena: Arena::default(),
            input_keys: Vec::new(),
            injected: 0,
        }
    }

    /// The index of the shard `id` names, if the stream has it.
    pub(super) fn index_of(&self, id: &str) -> Option<usize> {
        (0..self.shards.len()).find(|index| *shard_id(*index) == *id)
    }

    /// The partition key of the next record a test injects (Kinesis requires one, and a test
    /// names none), with its hash key: random keys given out shard by shard in turn, so inputs
    /// spread evenly over the shards, and an input costs neither a key nor an MD5 of its own.
    pub(super) fn input_key(&mut self) -> (SharedStr, u128) {
        let shards = self.shards.len();
        if self.input_keys.is_empty() {
            let mut keys: Vec<Vec<(SharedStr, u128)>> = vec![Vec::new(); shards];
            let mut short = shards;
            while short > 0 {
                let key = SharedStr::from(random_key());
                let hash = hash_key(&key);
                let of_shard = &mut keys[shard_of_hash(hash, shards)];
                if of_shard.len() < INPUT_KEYS_PER_SHARD {
                    of_shard.push((key, hash));
                    if of_shard.len() == INPUT_KEYS_PER_SHARD {
                        short -= 1;
                    }
                }
            }
            self.input_keys = keys;
        }
        let n = self.injected;
        self.injected += 1;
        let (key, hash) = &self.input_keys[n % shards][(n / shards) % INPUT_KEYS_PER_SHARD];
        (key.clone(), *hash)
    }
}

/// The bytes of the records a test injects into one stream, written one after another into
/// shared chunks: a record is a slice of its chunk, so storing it allocates nothing of its own
/// and each delivery's copy of it only counts a reference (a buffer of its own would be
/// allocated once, and again when it is first shared). A chunk lives as long as a record in it,
/// which the stream's log keeps anyway.
#[derive(Debug, Default)]
pub(super) struct Arena(BytesMut);

/// The size of an [`Arena`]'s chunks: about 1,500 small records each.
const ARENA_CHUNK: usize = 64 * 1024;

impl Arena {
    /// `payload` with `headers` in our envelope, as a record of its own.
    pub(super) fn encode(&mut self, payload: &[u8], headers: &ruststream::HeaderMap) -> Bytes {
        let len = envelope::encoded_len(payload, headers);
        if self.0.capacity() < len {
            self.0 = BytesMut::with_capacity(ARENA_CHUNK.max(len));
        }
        envelope::encode_into(&mut self.0, payload, headers);
        self.0.split().freeze()
    }
}

/// A partition key's hash key: its MD5 as a 128-bit number, as Kinesis hashes keys.
pub(super) fn hash_key(partition_key: &str) -> u128 {
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

/// Which shard of `shards` a hash key lands in, in equal ranges.
pub(super) fn shard_of_hash(hash: u128, shards: usize) -> usize {
    let width = u128::MAX / shards as u128;
    usize::try_from(hash / width).unwrap_or(0).min(shards - 1)
}

/// The id of the shard at `index`, as Kinesis names it; made once per index and shared after
/// (every delivery names its shard).
pub(crate) fn shard_id(index: usize) -> Arc<str> {
    static IDS: Mutex<Vec<Arc<str>>> = Mutex::new(Vec::new());
    let mut ids = IDS.lock().unwrap_or_else(PoisonError::into_inner);
    while ids.len() <= index {
        let next = ids.len();
        ids.push(Arc::from(format!("shardId-{next:012}")));
    }
    Arc::clone(&ids[index])
}

/// A random partition key (32 hex digits), as a publish without one gets, in one allocation.
fn random_key() -> Arc<str> {
    fixed_width::<32>(rand::random::<u128>(), 16)
}

/// How many sequence numbers are formatted at once, into one string.
const SEQUENCES_AHEAD: u64 = 64;

/// The digits of a sequence number: 56, as Kinesis's have.
const SEQUENCE_DIGITS: usize = 56;

/// The sequence numbers of the next records written, formatted ahead: [`SEQUENCES_AHEAD`] in
/// one string their records share, so a record written costs no allocation of its own for its
/// sequence number (a `SharedStr` of a text of its own costs two).
#[derive(Debug, Default)]
pub(super) struct Sequences {
    /// The first number of `block`, and how many it holds.
    first: u64,
    count: u64,
    block: Option<Shared>,
}

impl Sequences {
    /// The sequence number of the `n`th record written.
    pub(super) fn number(&mut self, n: u64) -> SharedStr {
        let block = match &self.block {
            Some(block) if n >= self.first && n - self.first < self.count => block,
            _ => {
                let mut gathered =
                    Gathered::with_capacity(SEQUENCE_DIGITS * SEQUENCES_AHEAD as usize);
                let mut count = 0;
                for ahead in (0..SEQUENCES_AHEAD).map_while(|k| n.checked_add(k)) {
                    let digits = fixed_digits::<SEQUENCE_DIGITS>(u128::from(ahead), 10);
                    gathered.push(std::str::from_utf8(&digits).unwrap_or_default());
                    count += 1;
                }
                self.first = n;
                self.count = count;
                self.block.insert(gathered.share())
            }
        };
        let at = usize::try_from(n - self.first).unwrap_or(0) * SEQUENCE_DIGITS;
        block.part((at, at + SEQUENCE_DIGITS))
    }
}

/// The sequence number of the `n`th record written: 56 digits, as Kinesis's are.
#[cfg(test)]
fn sequence_number(n: u64) -> Arc<str> {
    fixed_width::<SEQUENCE_DIGITS>(u128::from(n), 10)
}

/// `n` in `radix` (10 or 16), zero-padded to `WIDTH` digits, in one allocation (the shared
/// string).
fn fixed_width<const WIDTH: usize>(n: u128, radix: u32) -> Arc<str> {
    Arc::from(std::str::from_utf8(&fixed_digits::<WIDTH>(n, radix)).unwrap_or_default())
}

/// `n` in `radix` (10 or 16), zero-padded to `WIDTH` digits, formatted on the stack.
fn fixed_digits<const WIDTH: usize>(n: u128, radix: u32) -> [u8; WIDTH] {
    let mut digits = [b'0'; WIDTH];
    let mut slots = digits.iter_mut().rev();
    let digit_of = |value: u64| {
        let value = u32::try_from(value).unwrap_or(0);
        char::from_digit(value, radix).map_or(b'0', |c| c as u8)
    };
    // Digits of the part above 64 bits in u128 arithmetic (a library call per division), then
    // the rest, all of a sequence number, in u64.
    let mut rest = n;
    let mut small = loop {
        if let Ok(small) = u64::try_from(rest) {
            break small;
        }
        let Some(slot) = slots.next() else {
            break 0;
        };
        *slot = digit_of(u64::try_from(rest % u128::from(radix)).unwrap_or(0));
        rest /= u128::from(radix);
    };
    for slot in slots {
        if small == 0 {
            break;
        }
        *slot = digit_of(small % u64::from(radix));
        small /= u64::from(radix);
    }
    digits
}

/// Which shard of `shards` a partition key lands in.
#[cfg(test)]
pub(crate) fn shard_of(partition_key: &str, shards: usize) -> usize {
    shard_of_hash(hash_key(partition_key), shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_records_spread_evenly_over_the_shards_under_keys_of_their_shard() {
        for shards in [1u32, 3, 48] {
            let mut log = StreamLog::new(shards);
            let shards = shards as usize;
            let mut per_shard = vec![0usize; shards];
            let mut keys = std::collections::HashSet::new();
            for _ in 0..shards * 40 {
                let (key, hash) = log.input_key();
                assert_eq!(hash, hash_key(&key), "the hash key is the key's MD5");
                per_shard[shard_of_hash(hash, shards)] += 1;
                keys.insert(key);
            }
            assert!(per_shard.iter().all(|n| *n == 40), "{per_shard:?}");
            assert_eq!(keys.len(), shards * INPUT_KEYS_PER_SHARD);
        }
    }

    #[test]
    fn one_key_always_lands_in_one_shard_and_keys_spread() {
        let shards: std::collections::HashSet<usize> =
            (0..200).map(|i| shard_of(&format!("key-{i}"), 4)).collect();
        assert_eq!(shards.len(), 4, "200 keys reach all four shards");
        assert_eq!(shard_of("customer-1", 4), shard_of("customer-1", 4));
        assert_eq!(shard_of("anything", 1), 0);
    }

    #[test]
    fn sequence_numbers_formatted_ahead_read_as_each_alone_and_share_a_string_by_the_block() {
        let mut sequences = Sequences::default();
        let first = sequences.number(1);
        let mut last = first.clone();
        for n in 1..=SEQUENCES_AHEAD {
            let number = sequences.number(n);
            assert_eq!(&*number, &*sequence_number(n));
            assert!(number.shares_with(&first), "{n}: one string for the block");
            last = number;
        }
        let next = sequences.number(SEQUENCES_AHEAD + 1);
        assert_eq!(&*next, &*sequence_number(SEQUENCES_AHEAD + 1));
        assert!(!next.shares_with(&last), "past the block, a new one");
        // Numbers that jump (another stream wrote between), back or far ahead, and the last.
        for n in [7, 1_000_000, 1_000_001, u64::MAX - 1, u64::MAX, 3] {
            assert_eq!(&*sequences.number(n), &*sequence_number(n), "{n}");
        }
    }

    #[test]
    fn sequence_numbers_and_keys_are_fixed_width_as_formatted() {
        assert_eq!(&*sequence_number(42), format!("{:056}", 42).as_str());
        assert_eq!(
            &*sequence_number(u64::MAX),
            format!("{:056}", u64::MAX).as_str()
        );
        assert_eq!(
            &*fixed_width::<32>(0xab_cdef, 16),
            format!("{:032x}", 0xab_cdef).as_str()
        );
        // Past 64 bits: the high digits in u128 arithmetic, the rest in u64.
        let wide = u128::MAX - 12_345;
        assert_eq!(
            &*fixed_width::<40>(wide, 10),
            format!("{wide:040}").as_str()
        );
        assert_eq!(
            &*fixed_width::<32>(wide, 16),
            format!("{wide:032x}").as_str()
        );
        let just_past = u128::from(u64::MAX) + 1;
        assert_eq!(
            &*fixed_width::<40>(just_past, 10),
            format!("{just_past:040}").as_str()
        );
        let key = random_key();
        assert!(
            key.len() == 32
                && key
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }
}
