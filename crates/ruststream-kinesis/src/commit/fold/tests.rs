//! The fold's limits and its order.

use super::*;
use crate::commit::ItemRef;

fn unit(actions: usize, bytes: usize, keys: &[u64]) -> UnitSize {
    UnitSize {
        actions,
        bytes,
        items: keys
            .iter()
            .map(|&key| ItemRef {
                table: 1,
                key: Some(key),
            })
            .collect(),
    }
}

#[test]
fn a_fold_never_exceeds_the_actions_with_its_rows() {
    let queue = [
        unit(40, 10, &[1]),
        unit(40, 10, &[2]),
        unit(19, 10, &[3]),
        unit(1, 1, &[4]),
    ];
    // 40 + 40 + 19 + one row = 100; the fourth would make 101.
    assert_eq!(fold(&queue, 1, Limits::DYNAMODB), 3);
    // Two rows (a batch over two shards): the third no longer fits.
    assert_eq!(fold(&queue, 2, Limits::DYNAMODB), 2);
}

#[test]
fn a_fold_never_exceeds_the_bytes_and_keeps_order() {
    let limits = Limits::DYNAMODB;
    let big = limits.bytes / 2;
    let queue = [unit(1, big, &[1]), unit(1, big, &[2]), unit(1, 10, &[3])];
    assert_eq!(
        fold(&queue, 1, limits),
        1,
        "the second does not fit beside the row, and the small third must not pass it"
    );
}

#[test]
fn a_fold_never_puts_two_actions_on_one_item_in_one_request() {
    let queue = [
        unit(1, 10, &[1]),
        unit(1, 10, &[2]),
        unit(1, 10, &[1]),
        unit(1, 10, &[3]),
    ];
    assert_eq!(fold(&queue, 1, Limits::DYNAMODB), 2);
    let unknown_key = UnitSize {
        items: [ItemRef {
            table: 1,
            key: None,
        }]
        .into(),
        ..unit(1, 10, &[])
    };
    let queue = [unit(1, 10, &[5]), unknown_key];
    assert_eq!(
        fold(&queue, 1, Limits::DYNAMODB),
        1,
        "a put of an unknown key touches the whole table"
    );
}

#[test]
fn units_without_writes_fold_freely_and_the_head_is_always_taken() {
    let empty = vec![UnitSize::empty(); 5_000];
    assert_eq!(fold(&empty, 1, Limits::DYNAMODB), 5_000);
    let too_big = [unit(150, 10, &[1])];
    assert_eq!(fold(&too_big, 1, Limits::DYNAMODB), 1);
    assert_eq!(fold(&[], 1, Limits::DYNAMODB), 0);
}

#[test]
fn a_unit_fits_alone_or_names_the_limit_it_exceeds() {
    assert_eq!(fits(&unit(99, 10, &[]), 1, Limits::DYNAMODB), Ok(()));
    assert_eq!(
        fits(&unit(99, 10, &[]), 2, Limits::DYNAMODB),
        Err(Exceeded::Actions {
            limit: 98,
            staged: 99
        })
    );
    let limit = Limits::DYNAMODB.bytes - Limits::ROW_BYTES;
    assert_eq!(fits(&unit(1, limit, &[]), 1, Limits::DYNAMODB), Ok(()));
    assert_eq!(
        fits(&unit(1, limit + 1, &[]), 1, Limits::DYNAMODB),
        Err(Exceeded::Bytes {
            limit,
            staged: limit + 1
        })
    );
}
