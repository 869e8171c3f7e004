//! The buffers a shard's reads reuse.

use crate::delivery::record::Record;

/// The `Vec`s a shard's reads fill and the machine hands back emptied, so that a read of a few
/// records allocates nothing, nor does a busy shard's read of many: a large buffer is kept
/// while the shard's reads fill at least a quarter of it, and let go once they do not (a quiet
/// shard would keep it for nothing). Allocated again at every read of a thousand records, it
/// cost about 60 instructions a record (`kinesis-bench record-path`).
#[derive(Default)]
pub(super) struct Buffers {
    records: Vec<Record>,
}

/// The largest buffer kept for the next read.
const KEPT_CAPACITY: usize = 64;

impl Buffers {
    /// The buffer for the next read's decoded records (empty).
    pub(super) fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    /// Keeps `records`, emptied, for the next read, the shard's last read having brought `read`
    /// records: a large buffer only while reads fill a quarter of it (see `keep`).
    pub(super) fn keep_records(&mut self, mut records: Vec<Record>, read: usize) {
        if records.capacity() > KEPT_CAPACITY && read.saturating_mul(4) >= records.capacity() {
            records.clear();
            self.records = records;
            return;
        }
        keep(&mut self.records, records);
    }
}

/// Puts `buffer`, emptied, in `slot`, unless it is large or holds nothing (an answer without
/// records hands back a `Vec` that never allocated, which would replace a kept one).
fn keep<T>(slot: &mut Vec<T>, mut buffer: Vec<T>) {
    if (1..=KEPT_CAPACITY).contains(&buffer.capacity()) {
        buffer.clear();
        *slot = buffer;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_read_or_a_busy_shard_s_leaves_its_buffer_for_the_next_and_a_quiet_one_does_not() {
        let mut buffers = Buffers::default();
        let mut small = Vec::with_capacity(4);
        small.push(Record::plain("1", b"a"));
        buffers.keep_records(small, 1);
        let kept = buffers.take_records();
        assert!(kept.is_empty() && kept.capacity() >= 4, "kept, emptied");
        assert_eq!(buffers.take_records().capacity(), 0, "taken once");
        buffers.keep_records(Vec::with_capacity(4), 4);
        buffers.keep_records(Vec::new(), 0);
        assert!(
            buffers.take_records().capacity() >= 4,
            "an answer without records leaves the kept buffer"
        );
        buffers.keep_records(Vec::with_capacity(KEPT_CAPACITY + 1), 1);
        assert_eq!(
            buffers.take_records().capacity(),
            0,
            "a large buffer is let go"
        );
        let busy = 4 * KEPT_CAPACITY;
        buffers.keep_records(Vec::with_capacity(busy), busy / 4);
        assert!(
            buffers.take_records().capacity() >= busy,
            "a busy shard's large buffer is kept: its reads fill a quarter of it"
        );
        buffers.keep_records(Vec::with_capacity(busy), busy / 4 - 1);
        assert_eq!(
            buffers.take_records().capacity(),
            0,
            "and let go once they fill less"
        );
    }
}
