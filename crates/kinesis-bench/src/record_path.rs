//! The crate's own path of a record consumed, in instructions a record: `consume --quick` run
//! again under callgrind with one worker thread, and the inclusive cost of the functions a record
//! passes through between the SDK's answer and the framework's dispatch (and back, to its
//! settle and drop), divided by the records the service sides handled.

use std::path::PathBuf;
use std::process::Command;

use crate::Error;
use crate::report::{Figure, thousands};

/// The crate's record path, in the order a record takes it: a name for the report, and the
/// function as `callgrind_annotate` names it (none calls another of the list on this path but
/// as [`NESTED`] says, so their inclusive costs add up). Every function of the crate a record
/// passes through between the SDK's answer and the framework's dispatch, and back to its settle
/// and drop: a part left out would make the sum look better than the path is.
const PATH: &[(&str, &str)] = &[
    // Since the twenty-sixth session the records are taken apart where they are decoded (the
    // first counts in the second); an earlier profile has them apart.
    ("the SDK's records taken apart", TAKEN_APART),
    ("decoded (KPL, envelope)", DECODED),
    (
        "the answer given to the shard",
        "ruststream_kinesis::shard::ShardHandle::read_answered",
    ),
    (
        "handed out under the shard's lock",
        "ruststream_kinesis::shard::ShardHandle::next_reads",
    ),
    (
        "the deliveries built",
        "ruststream_kinesis::live::reader::Reader::delivered",
    ),
    ("the channel's receive", RECEIVE),
    ("the pull's check", PULL_CHECK),
    (
        "the lease check at the handler",
        "<ruststream_kinesis::delivery::message::KinesisMessage as ruststream_core::message::IncomingMessage>::decode_error",
    ),
    (
        "the context built",
        "<ruststream_kinesis::delivery::context::KinesisContext as ruststream_core::field::BuildContext<ruststream_kinesis::delivery::message::KinesisMessage>>::build",
    ),
    (
        "the context dropped",
        "core::ptr::drop_in_place<ruststream_kinesis::delivery::context::KinesisContext>",
    ),
    (
        "a batch's records grouped (the batch handler's side)",
        "ruststream_kinesis::delivery::subscriber::units_of",
    ),
    ("the acknowledgement (its settle)", ACK),
    ("the delivery dropped", DELIVERY_DROP),
];

/// Where an answer's records were taken apart before the twenty-sixth session, on their own.
const TAKEN_APART: &str = "ruststream_kinesis::kinesis::api::fetched_records";

/// Where an answer's records are decoded, and since the twenty-sixth session taken apart as
/// they are (`AnswerRecords::taken_apart`, an iterator inlined there).
const DECODED: &str = "ruststream_kinesis::live::reader::Reader::decoded";

/// The drop of what is left of an answer taken apart, which [`DECODED`] may call out of line:
/// it frees the SDK's list of the answer's records.
const TAKEN_APART_DROP: &str =
    "core::ptr::drop_in_place<ruststream_kinesis::kinesis::api::TakenApart>";

/// The delivery's `ack`: its settle, and its drop ([`DELIVERY_DROP`], counted apart: [`NESTED`]).
const ACK: &str = "<ruststream_kinesis::delivery::message::KinesisMessage as ruststream_core::message::IncomingMessage>::ack";

/// Where [`ACK`] is not in a profile, what stands for it: the settle it calls. Until the
/// twenty-fourth session `ack` was an `async fn`, inlined into the framework's future (which
/// then moved the delivery into it, a copy the sum did not count); such a profile, read again,
/// counts its settle alone.
const ACK_INLINED: &str = "ruststream_kinesis::delivery::message::KinesisMessage::settle_now";

/// The check of a delivery as the subscription takes it. Since the twenty-fourth session it is
/// made in the receive (`Inlet::poll_next`, rather than in a stream combinator after it) and
/// inlined there, where it counts; a profile from before has it on its own.
const PULL_CHECK: &str = "ruststream_kinesis::delivery::message::KinesisMessage::is_current";

/// The receive, which [`PULL_CHECK`] may be inlined into.
const RECEIVE: &str = "ruststream_kinesis::delivery::outlet::Inlet::poll_next";

/// The calls between functions of [`PATH`] (caller, callee): the callee is its own part of the
/// sum, so the caller counts without it.
const NESTED: &[(&str, &str)] = &[
    (ACK, DELIVERY_DROP),
    // Where the check is not inlined into the receive; and the drop of a delivery the receive
    // lets go (stale, or of a stopped shard).
    (RECEIVE, PULL_CHECK),
    (RECEIVE, DELIVERY_DROP),
];

/// What the path spends releasing what the SDK allocated for a record's texts, which the SDK
/// loop spends as well (it is part of the floor the issue names, the SDK's `GetRecords` parse):
/// a function of [`PATH`] and the callee that releases. The record's two strings and the
/// answer's buffer, where the records are taken apart (in the decoding since the twenty-sixth
/// session, which released nothing directly before).
const SDK_TEXTS_RELEASED: &[(&str, &str)] = &[
    (TAKEN_APART, "__rustc::__rust_dealloc"),
    (
        TAKEN_APART,
        "<alloc::vec::into_iter::IntoIter<T,A> as core::ops::drop::Drop>::drop",
    ),
    (DECODED, "__rustc::__rust_dealloc"),
    (
        DECODED,
        "<alloc::vec::into_iter::IntoIter<T,A> as core::ops::drop::Drop>::drop",
    ),
    // The answer's list, released where what is left of the taking apart is dropped (when the
    // compiler keeps that drop out of line).
    (
        TAKEN_APART_DROP,
        "<alloc::vec::into_iter::IntoIter<T,A> as core::ops::drop::Drop>::drop",
    ),
];

/// Where a record's payload is released: its drop, inside the delivery's.
const RECORD_DROP: &str = "core::ptr::drop_in_place<ruststream_kinesis::delivery::record::Record>";
const DELIVERY_DROP: &str =
    "core::ptr::drop_in_place<ruststream_kinesis::delivery::message::KinesisMessage>";

/// How bytes releases a `Bytes` made of a `Vec` never shared (by the buffer's address): the
/// SDK's buffer of the payload, freed as the SDK loop frees it.
const UNSHARED_DROPS: &[&str] = &[
    "bytes::bytes::promotable_even_drop",
    "bytes::bytes::promotable_odd_drop",
];

/// How bytes shares such a `Bytes` (a clone or a slice of it): it allocates a count, which the
/// unshared drop then frees as well, on the crate's behalf.
const SHARINGS: &[&str] = &[
    "bytes::bytes::promotable_even_clone",
    "bytes::bytes::promotable_odd_clone",
];

/// What the path spends releasing the SDK's allocations for a record, a record: its texts, and
/// its payload where no function of the crate shared a payload (else the payload's release is
/// counted as the crate's, since it frees a count the crate made too).
fn sdk_releases(costs: &Costs, records: u64) -> (f64, &'static str) {
    let texts: u64 = SDK_TEXTS_RELEASED
        .iter()
        .map(|(caller, callee)| costs.called(caller, callee))
        .sum();
    let shared = costs.calls.iter().any(|call| {
        call.caller.contains("ruststream_kinesis::") && SHARINGS.contains(&call.callee.as_str())
    });
    let payloads = if shared {
        0.0
    } else {
        // A record dropped elsewhere than in a delivery's drop is not on the path: the part of
        // the record's drops that the delivery's made.
        let on_path = costs.count(DELIVERY_DROP, RECORD_DROP) as f64
            / costs.count_to(RECORD_DROP).max(1) as f64;
        UNSHARED_DROPS
            .iter()
            .map(|drop| costs.called(RECORD_DROP, drop))
            .sum::<u64>() as f64
            * on_path
    };
    let what = if shared {
        "its two strings and the answer's buffer (not its payload's: a function of the crate \
         shared a payload, so its release frees a count the crate made)"
    } else {
        "its two strings, its payload, the answer's buffer"
    };
    ((texts as f64 + payloads) / records as f64, what)
}

/// The target of issue 29, item 5.
const TARGET: f64 = 1_200.0;

pub fn run() -> Result<Vec<Figure>, Error> {
    let mut f = Figure::new("crate's own path per record consumed", "record-path");
    f.target = format!("≤ {} instructions", thousands(TARGET));
    if Command::new("valgrind").arg("--version").output().is_err() {
        f.measured = "not measured: valgrind is not installed".to_owned();
        return Ok(vec![f]);
    }
    let (profile, records) = match std::env::var_os("KINESIS_BENCH_PROFILE") {
        // An earlier run's profile, read again (a commit's figure before a change, counted as
        // this one counts): its records in KINESIS_BENCH_RECORDS.
        Some(profile) => {
            let records = std::env::var("KINESIS_BENCH_RECORDS")
                .ok()
                .and_then(|records| records.parse::<u64>().ok())
                .ok_or("KINESIS_BENCH_PROFILE needs KINESIS_BENCH_RECORDS: the records its run's service sides handled")?;
            (PathBuf::from(profile), records)
        }
        None => profiled()?,
    };
    let annotated = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--tree=calling", "--threshold=100"])
        .arg(&profile)
        .output()?;
    if !annotated.status.success() {
        return Err(format!("callgrind_annotate exited with {}", annotated.status).into());
    }
    let mut costs = Costs::read(&String::from_utf8_lossy(&annotated.stdout));
    costs.earlier = std::env::var_os("KINESIS_BENCH_PROFILE").is_some();
    let mut total = 0.0;
    let mut parts = Vec::new();
    for (label, function) in PATH {
        // A function renamed or inlined away would count as nothing, and the sum would look
        // better than the path is: the run fails instead, naming it.
        let Some(cost) = costs.own(function) else {
            return Err(format!(
                "record-path: `{function}` ({label}) is not in the profile; it was renamed or \
                 inlined: name what the record's path calls now in record_path.rs's PATH"
            )
            .into());
        };
        let per = cost as f64 / records as f64;
        total += per;
        parts.push(format!("{label} {}", thousands(per)));
    }
    let (released, what) = sdk_releases(&costs, records);
    let own = total - released;
    f.measured = format!(
        "{} instructions a record ({} on the path, less {} releasing what the SDK allocated)",
        thousands(own),
        thousands(total),
        thousands(released)
    );
    f.pass = Some(own <= TARGET);
    f.detail(format!(
        "`valgrind --tool=callgrind kinesis-bench consume --quick` with TOKIO_WORKER_THREADS=1; \
         the inclusive instructions of the crate's functions on a record's path (the allocator \
         included), divided by the {records} records the two service sides handled (a handler \
         of one record and one of batches: the context is built for the first side's records \
         only); less what the path spends releasing the SDK's allocations for the record \
         ({what}), which the SDK loop spends as well. Not in the sum: the channel's send, \
         inlined into the reader's loop (about 4 a record when it was not), and the wait for \
         room where the channel is full"
    ));
    f.detail(format!("per record: {}", parts.join(", ")));
    Ok(vec![f])
}

/// Runs `consume --quick` under callgrind: the profile, and the records the service sides
/// handled.
fn profiled() -> Result<(PathBuf, u64), Error> {
    let dir =
        PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned()))
            .join("kinesis-bench");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("callgrind.record-path.out");
    let run = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(std::env::current_exe()?)
        .args(["consume", "--quick"])
        .env(crate::consume::SIDES_IN_TURN, "1")
        .env("TOKIO_WORKER_THREADS", "1")
        .output()?;
    if !run.status.success() {
        return Err(format!(
            "consume --quick under valgrind exited with {}: {}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        )
        .into());
    }
    let records = service_records(&String::from_utf8_lossy(&run.stderr));
    if records == 0 {
        return Err("consume --quick under valgrind: no service side handled a record".into());
    }
    Ok((out, records))
}

/// The records the service sides of a `consume` run handled, from its progress lines
/// (`consume: round 1 service + MemoryLeaseStore: 8000 records, ...`).
fn service_records(log: &str) -> u64 {
    log.lines()
        .filter(|line| line.starts_with("consume: round") && line.contains(" service "))
        .filter_map(|line| {
            let (_, after) = line.rsplit_once("LeaseStore")?;
            let after = after.split_once(": ")?.1;
            after.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// The inclusive instructions of each function, and of each callee within its callers, from
/// `callgrind_annotate --inclusive=yes --tree=calling`: a function's line is marked `*`
/// (`14,228,662 ( 2.45%)  *  ???:name [/path/to/binary]`), and the lines under it marked `>`
/// are what it spent in each function it called (`5,379,299 ( 0.95%)  >   ???:name (32,016x)
/// [...]`).
#[derive(Debug, Default)]
struct Costs {
    functions: Vec<(String, u64)>,
    calls: Vec<Call>,
    /// An earlier run's profile, read again: what was laid out otherwise then may stand in
    /// ([`ACK_INLINED`] for [`ACK`]). A profile of this run without it fails, naming it.
    earlier: bool,
}

/// What `caller` spent in `callee`, over how many calls.
#[derive(Debug)]
struct Call {
    caller: String,
    callee: String,
    cost: u64,
    count: u64,
}

impl Costs {
    fn read(annotated: &str) -> Self {
        let mut costs = Self::default();
        let mut caller: Option<String> = None;
        for line in annotated.lines() {
            let Some(line) = annotated_line(line) else {
                caller = None;
                continue;
            };
            match line.mark {
                '*' => {
                    costs.functions.push((line.name.clone(), line.cost));
                    caller = Some(line.name);
                }
                '>' => {
                    if let Some(caller) = &caller {
                        costs.calls.push(Call {
                            caller: caller.clone(),
                            callee: line.name,
                            cost: line.cost,
                            count: line.count,
                        });
                    }
                }
                _ => caller = None,
            }
        }
        costs
    }

    /// What `function` of [`PATH`] counts for: its inclusive instructions less its calls of
    /// other functions of the path ([`NESTED`]); for [`ACK`] inlined away in an earlier profile,
    /// [`ACK_INLINED`]'s;
    /// for [`PULL_CHECK`] inlined into [`RECEIVE`], nothing more.
    fn own(&self, function: &str) -> Option<u64> {
        let Some(cost) = self.inclusive(function) else {
            return match function {
                ACK if self.earlier => self.inclusive(ACK_INLINED),
                // Counted in the receive, which the profile must have.
                PULL_CHECK => self.inclusive(RECEIVE).map(|_| 0),
                // Counted in the decoding, which the profile must have.
                TAKEN_APART => self.inclusive(DECODED).map(|_| 0),
                _ => None,
            };
        };
        let nested: u64 = NESTED
            .iter()
            .filter(|(caller, _)| *caller == function)
            .map(|(caller, callee)| self.called(caller, callee))
            .sum();
        Some(cost.saturating_sub(nested))
    }

    /// The inclusive instructions of `function`, if the profile has it.
    fn inclusive(&self, function: &str) -> Option<u64> {
        self.functions
            .iter()
            .find(|(name, _)| name == function)
            .map(|(_, cost)| *cost)
    }

    fn between<'a>(&'a self, caller: &'a str, callee: &'a str) -> impl Iterator<Item = &'a Call> {
        self.calls
            .iter()
            .filter(move |call| call.caller == caller && call.callee == callee)
    }

    /// What `caller` spent in `callee` (0 when it did not call it).
    fn called(&self, caller: &str, callee: &str) -> u64 {
        self.between(caller, callee).map(|call| call.cost).sum()
    }

    /// How often `caller` called `callee`.
    fn count(&self, caller: &str, callee: &str) -> u64 {
        self.between(caller, callee).map(|call| call.count).sum()
    }

    /// How often anything called `callee`.
    fn count_to(&self, callee: &str) -> u64 {
        self.calls
            .iter()
            .filter(|call| call.callee == callee)
            .map(|call| call.count)
            .sum()
    }
}

/// One line of the tree.
struct Line {
    cost: u64,
    /// `*` a function, `>` a callee, `<` a caller.
    mark: char,
    name: String,
    /// A callee's calls (`name (32,016x)`); 0 for a function's line.
    count: u64,
}

/// A line of the tree, if it is one (`14,228,662 ( 2.45%)  *  ???:name [/path/to/binary]`).
fn annotated_line(line: &str) -> Option<Line> {
    let line = line.trim_start();
    let (cost, rest) = line.split_once(' ')?;
    let cost = cost.replace(',', "").parse::<u64>().ok()?;
    let (_, rest) = rest.split_once(')')?;
    let rest = rest.trim_start();
    let mark = rest.chars().next()?;
    let (_, named) = rest.split_once("???:")?;
    let name = named.rsplit_once(" [").map_or(named, |(name, _)| name);
    // A callee's line names how often it was called: `name (32,016x)`.
    let (name, count) = match name.rsplit_once(" (") {
        Some((name, calls)) if calls.ends_with("x)") => (
            name,
            calls
                .trim_end_matches("x)")
                .replace(',', "")
                .parse::<u64>()
                .unwrap_or(0),
        ),
        _ => (name, 0),
    };
    Some(Line {
        cost,
        mark,
        name: name.trim().to_owned(),
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_sides_records_and_the_functions_costs_are_read_off_their_lines() {
        let log = "consume: round 1 SDK loop: 8000 records, 0.69 s from start\n\
                   consume: round 1 service + MemoryLeaseStore: 8000 records, 1.28 s\n\
                   consume: round 1 service + MemoryLeaseStore, batch handler: 7999 records, 1 s\n";
        assert_eq!(service_records(log), 15_999);
        let annotated = "--------\n\
            \x20 11,827,528 ( 2.08%)  *  ???:ruststream_kinesis::kinesis::api::fetched_records [/x/kinesis-bench]\n\
            \x20  5,379,299 ( 0.95%)  >   ???:__rustc::__rust_dealloc (32,016x) [/x/kinesis-bench]\n\
            \x20    990,507 ( 0.17%)  >   ???:ruststream_kinesis::shared_str::Gathered::share (47x) [/x/kinesis-bench]\n\
            \n\
            \x20  4,251,360 ( 0.75%)  <   ???:ruststream_runtime::dispatch (16,000x) [/x/kinesis-bench]\n\
            \x20  4,251,360 ( 0.75%)  *  ???:core::ptr::drop_in_place<ruststream_kinesis::delivery::message::KinesisMessage> [/x/kinesis-bench]\n\
            \x20  3,403,360 ( 0.60%)  >   ???:__rustc::__rust_dealloc (16,000x) [/x/kinesis-bench]\n\
            569,172,130 (100.0%)  PROGRAM TOTALS\n";
        let costs = Costs::read(annotated);
        assert_eq!(
            costs.inclusive("ruststream_kinesis::kinesis::api::fetched_records"),
            Some(11_827_528)
        );
        assert_eq!(
            costs.inclusive("__rustc::__rust_dealloc"),
            None,
            "a callee, not a function's line"
        );
        assert_eq!(
            costs.called(
                "ruststream_kinesis::kinesis::api::fetched_records",
                "__rustc::__rust_dealloc"
            ),
            5_379_299,
            "what the caller spent in it, not what the drop below spent"
        );
        assert_eq!(
            costs.called(
                "core::ptr::drop_in_place<ruststream_kinesis::delivery::message::KinesisMessage>",
                "ruststream_runtime::dispatch"
            ),
            0,
            "a caller's line is not a callee's"
        );
    }

    #[test]
    fn the_acknowledgement_counts_without_its_drop_and_what_was_inlined_counts_where_it_was() {
        let line = |cost: u64, mark: &str, name: &str| {
            format!("  {cost} ( 0.1%)  {mark}  ???:{name} [/x/kinesis-bench]\n")
        };
        let mut tree = line(500, "*", ACK);
        tree += &line(200, ">", &format!("{ACK_INLINED} (2x)"));
        tree += &line(260, ">", &format!("{DELIVERY_DROP} (2x)"));
        tree += "\n";
        tree += &line(200, "*", ACK_INLINED);
        tree += "\n";
        tree += &line(300, "*", DELIVERY_DROP);
        let costs = Costs::read(&tree);
        assert_eq!(
            costs.own(ACK),
            Some(240),
            "the drop inside it counts as its own part"
        );
        assert_eq!(costs.own(DELIVERY_DROP), Some(300));
        let mut inlined = Costs::read(&line(200, "*", ACK_INLINED));
        assert_eq!(
            inlined.own(ACK),
            None,
            "inlined in this run's build: the run fails"
        );
        inlined.earlier = true;
        assert_eq!(
            inlined.own(ACK),
            Some(200),
            "an earlier profile's inlined ack counts its settle"
        );
        assert_eq!(
            Costs::read("").own(ACK),
            None,
            "neither: the run fails, naming it"
        );
        let mut tree = line(90, "*", RECEIVE);
        tree += &line(20, ">", &format!("{DELIVERY_DROP} (1x)"));
        let received = Costs::read(&tree);
        assert_eq!(received.own(PULL_CHECK), Some(0), "counted in the receive");
        assert_eq!(
            received.own(RECEIVE),
            Some(70),
            "a stale delivery's drop counts as the drop's"
        );
        assert_eq!(Costs::read("").own(PULL_CHECK), None);
        // Taken apart where they are decoded: counted there, and so are the SDK's releases.
        let mut tree = line(300, "*", DECODED);
        tree += &line(30, ">", "__rustc::__rust_dealloc (2x)");
        tree += &line(
            10,
            ">",
            "<alloc::vec::into_iter::IntoIter<T,A> as core::ops::drop::Drop>::drop (1x)",
        );
        let decoded = Costs::read(&tree);
        assert_eq!(decoded.own(TAKEN_APART), Some(0), "counted in the decoding");
        assert_eq!(decoded.own(DECODED), Some(300));
        let (released, _) = sdk_releases(&decoded, 2);
        assert!((released - 20.0).abs() < 1e-9, "{released}");
        assert_eq!(Costs::read("").own(TAKEN_APART), None);
        // The answer's list freed where what is left of the taking apart is dropped, out of
        // line: released all the same.
        let mut tree = line(300, "*", DECODED);
        tree += &line(30, ">", "__rustc::__rust_dealloc (2x)");
        tree += &line(11, ">", &format!("{TAKEN_APART_DROP} (1x)"));
        tree += "\n";
        tree += &line(11, "*", TAKEN_APART_DROP);
        tree += &line(
            10,
            ">",
            "<alloc::vec::into_iter::IntoIter<T,A> as core::ops::drop::Drop>::drop (1x)",
        );
        let (released, _) = sdk_releases(&Costs::read(&tree), 2);
        assert!((released - 20.0).abs() < 1e-9, "{released}");
    }

    /// The tree of a run whose records' texts cost 40 to release, and whose records' drops
    /// released payloads for 48, three of four of them in a delivery's drop; `sharing`: a
    /// function of the crate shared a payload.
    fn tree(sharing: bool) -> String {
        let line = |cost: u64, mark: &str, name: &str| {
            format!("  {cost} ( 0.1%)  {mark}  ???:{name} [/x/kinesis-bench]\n")
        };
        let mut tree = String::new();
        tree += &line(
            100,
            "*",
            "ruststream_kinesis::kinesis::api::fetched_records",
        );
        tree += &line(30, ">", "__rustc::__rust_dealloc (2x)");
        tree += &line(
            10,
            ">",
            "<alloc::vec::into_iter::IntoIter<T,A> as core::ops::drop::Drop>::drop (1x)",
        );
        tree += "\n";
        tree += &line(50, "*", DELIVERY_DROP);
        tree += &line(40, ">", &format!("{RECORD_DROP} (3x)"));
        tree += "\n";
        tree += &line(60, "*", RECORD_DROP);
        tree += &line(48, ">", "bytes::bytes::promotable_even_drop (4x)");
        tree += "\n";
        tree += &line(
            20,
            "*",
            "ruststream_kinesis::shard::ShardHandle::on_hand_back",
        );
        tree += &line(15, ">", &format!("{RECORD_DROP} (1x)"));
        if sharing {
            tree += "\n";
            tree += &line(9, "*", "ruststream_kinesis::kinesis::envelope::decode");
            tree += &line(5, ">", "bytes::bytes::promotable_even_clone (1x)");
        }
        tree
    }

    #[test]
    fn what_the_sdk_allocated_is_released_for_the_path_s_records_and_a_shared_payload_is_the_crate_s()
     {
        let (released, what) = sdk_releases(&Costs::read(&tree(false)), 2);
        // The texts' 40, and three quarters of the payloads' 48: per record of two.
        assert!((released - (40.0 + 36.0) / 2.0).abs() < 1e-9, "{released}");
        assert!(what.contains("its payload"), "{what}");
        let (released, what) = sdk_releases(&Costs::read(&tree(true)), 2);
        assert!((released - 20.0).abs() < 1e-9, "{released}");
        assert!(what.contains("not its payload"), "{what}");
    }
}
