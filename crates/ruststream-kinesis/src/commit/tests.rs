//! Tokens and item clashes.

use super::*;

#[test]
fn a_token_is_24_digits_in_the_row_and_27_characters_a_request() {
    let token = CommitToken {
        nonce: 0xa1,
        number: 2,
    };
    assert_eq!(token.base(), "00000000000000a100000002");
    assert_eq!(token.request(0), "00000000000000a100000002-00");
    assert_eq!(token.request(0x1f).len(), 27);
    assert_eq!(token.next().base(), "00000000000000a100000003");
    assert_ne!(token.request(1), token.request(0));
}

#[test]
fn actions_clash_on_one_item_or_on_a_table_whose_key_is_not_known() {
    let item = |table, key| ItemRef { table, key };
    assert!(item(1, Some(7)).clashes(&item(1, Some(7))));
    assert!(!item(1, Some(7)).clashes(&item(1, Some(8))));
    assert!(!item(1, Some(7)).clashes(&item(2, Some(7))));
    assert!(item(1, None).clashes(&item(1, Some(8))));
    assert!(item(1, Some(8)).clashes(&item(1, None)));
    assert!(!item(1, None).clashes(&item(2, None)));
}
