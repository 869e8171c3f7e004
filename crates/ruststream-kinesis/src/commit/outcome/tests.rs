//! The cancellation reasons, case by case.

use super::*;

/// Two units (two writes, then one), then two rows.
fn layout() -> Layout {
    Layout {
        units: vec![(UnitId(10), 2), (UnitId(11), 1)],
        rows: 2,
    }
}

fn reasons(codes: &[Option<&str>]) -> Vec<Reason> {
    codes.iter().map(|code| Reason::from_code(*code)).collect()
}

#[test]
fn each_cancellation_is_judged_by_what_refused() {
    let none = Some("None");
    let check = Some("ConditionalCheckFailed");
    let cases: [(&str, [Option<&str>; 5], Verdict); 8] = [
        (
            "a row refused: the rows decide",
            [none, none, none, none, check],
            Verdict::Rows(vec![1]),
        ),
        (
            "a row wins over a unit's refusal",
            [check, none, none, check, check],
            Verdict::Rows(vec![0, 1]),
        ),
        (
            "a unit's condition",
            [none, none, check, none, none],
            Verdict::UserRefused {
                unit: UnitId(11),
                action: 0,
                code: "ConditionalCheckFailed".to_owned(),
            },
        ),
        (
            "the first unit at fault",
            [none, Some("ValidationError"), check, none, none],
            Verdict::UserRefused {
                unit: UnitId(10),
                action: 1,
                code: "ValidationError".to_owned(),
            },
        ),
        (
            "a refusal wins over contention",
            [Some("TransactionConflict"), none, check, none, none],
            Verdict::UserRefused {
                unit: UnitId(11),
                action: 0,
                code: "ConditionalCheckFailed".to_owned(),
            },
        ),
        (
            "contention on a row (a renewal's or a handoff's write in progress)",
            [none, none, none, Some("TransactionConflict"), none],
            Verdict::NotApplied,
        ),
        (
            "throttled",
            [
                Some("ProvisionedThroughputExceeded"),
                none,
                none,
                none,
                Some("ThrottlingError"),
            ],
            Verdict::NotApplied,
        ),
        (
            "our own row invalid",
            [none, none, none, Some("ValidationError"), none],
            Verdict::RowInvalid {
                row: 0,
                code: "ValidationError".to_owned(),
            },
        ),
    ];
    for (case, codes, verdict) in cases {
        assert_eq!(judge(&reasons(&codes), &layout()), verdict, "{case}");
    }
}

#[test]
fn reasons_that_name_no_cause_are_contention() {
    assert_eq!(judge(&reasons(&[None; 5]), &layout()), Verdict::NotApplied);
    assert_eq!(judge(&[], &layout()), Verdict::NotApplied);
    // More reasons than actions: the extra ones belong to nothing.
    let mut extra = reasons(&[Some("None"); 5]);
    extra.push(Reason::ConditionFailed);
    assert_eq!(judge(&extra, &layout()), Verdict::NotApplied);
}

#[test]
fn a_code_this_version_does_not_know_is_the_actions_fault() {
    assert_eq!(
        Reason::from_code(Some("SomethingNew")),
        Reason::Invalid("SomethingNew".to_owned())
    );
    assert_eq!(
        Reason::from_code(Some("RequestLimitExceeded")),
        Reason::Throttled
    );
}
