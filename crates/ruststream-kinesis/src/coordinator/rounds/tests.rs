//! The order of a round's and the handover poll's calls, and when they run, on a virtual clock.

use std::time::Duration;

use super::*;
use crate::coordinator::twins::Incarnation;
use crate::lease::millis;
use crate::{KinesisPosition, LeaseTimings};

const OWNER: &str = "pod-a";
const NOW_MS: u64 = 1_700_000_000_000;
const LISTING: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_secs(1);

fn shard(id: &str) -> ShardInfo {
    ShardInfo {
        id: Arc::from(id),
        parents: Vec::new(),
        closed: false,
    }
}

struct Rig {
    rounds: Rounds<Duration>,
    coordinator: Coordinator<Duration>,
    reading: HashSet<Arc<str>>,
}

impl Rig {
    fn new() -> Self {
        Self {
            rounds: Rounds::new(LISTING, POLL, Duration::ZERO),
            coordinator: Coordinator::new(LeaseTimings::default(), KinesisPosition::TrimHorizon),
            reading: HashSet::new(),
        }
    }

    fn next(&mut self, now: Duration) -> Step<Duration> {
        self.rounds
            .next(&mut self.coordinator, &self.reading, OWNER, now, NOW_MS)
    }

    /// The first round at `now`: `ListShards` lists the one shard, and the rows' `list` is asked.
    fn first_listing(&mut self, now: Duration) {
        self.first_listing_of(1, now);
    }

    /// The first round at `now`: `ListShards` lists `count` shards (`shardId-0`, ...), and the
    /// rows' `list` is asked.
    fn first_listing_of(&mut self, count: usize, now: Duration) {
        assert!(matches!(self.next(now), Step::ListShards));
        let listing: Vec<ShardInfo> = (0..count).map(|n| shard(&format!("shardId-{n}"))).collect();
        self.rounds
            .listed(&mut self.coordinator, Shards::Listed(listing), now);
        assert!(matches!(self.next(now), Step::ListRows { .. }));
    }

    fn row(owner: Option<&str>, expiry_ms: u64) -> LeaseState {
        LeaseState {
            owner: owner.map(str::to_owned),
            expiry_ms,
            counter: 1,
            checkpoint: Some("7".to_owned()),
            behind_ms: None,
            handoff: None,
            commit_token: None,
        }
    }
}

#[test]
fn a_round_lists_reads_the_rows_and_takes_then_waits_for_the_next_listing() {
    let mut rig = Rig::new();
    let now = Duration::ZERO;
    assert!(
        matches!(rig.next(now), Step::ListShards),
        "the first round at once"
    );
    assert!(
        matches!(rig.next(now), Step::Wait(None)),
        "until ListShards answers"
    );
    rig.rounds.listed(
        &mut rig.coordinator,
        Shards::Listed(vec![shard("shardId-0"), shard("shardId-1")]),
        now,
    );
    assert!(matches!(rig.next(now), Step::ListRows { .. }));
    let held = Rig::row(Some("pod-b"), NOW_MS + 10_000);
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(vec![(Arc::from("shardId-1"), held)]),
        OWNER,
        now,
        NOW_MS,
    );
    let Step::Take(takes) = rig.next(now) else {
        panic!("the free shard is taken");
    };
    assert_eq!(takes.len(), 1);
    assert_eq!(&*takes[0].0.id, "shardId-0", "the other is held elsewhere");
    assert!(
        matches!(rig.next(now), Step::Wait(None)),
        "until the takes are over"
    );
    let end = Duration::from_millis(300);
    rig.rounds.took(&mut rig.coordinator, end);
    assert!(rig.rounds.first_round_over());
    let Step::Wait(Some(until)) = rig.next(end) else {
        panic!("a wait");
    };
    assert_eq!(
        until,
        end + POLL,
        "the poll first, counted from the first round's end"
    );
}

#[test]
fn a_store_that_cannot_list_has_its_rows_read_one_by_one() {
    let mut rig = Rig::new();
    let now = Duration::ZERO;
    rig.first_listing(now);
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Unsupported,
        OWNER,
        now,
        NOW_MS,
    );
    let Step::ReadRows(wanted) = rig.next(now) else {
        panic!("a read per row");
    };
    assert_eq!(wanted, vec![Arc::<str>::from("shardId-0")]);
    let unreadable: HashSet<Arc<str>> = [Arc::from("shardId-0")].into();
    rig.rounds.rows_read(
        &mut rig.coordinator,
        Rows::new(),
        &unreadable,
        OWNER,
        now,
        NOW_MS,
    );
    assert!(
        matches!(rig.next(now), Step::Wait(Some(_))),
        "a shard whose row could not be read is left for a later round"
    );
}

#[test]
fn the_handover_poll_of_a_store_without_notices_reads_the_rows_at_every_poll() {
    let mut rig = Rig::new();
    let now = Duration::ZERO;
    rig.first_listing(now);
    let held = Rig::row(Some("pod-b"), NOW_MS + 10_000);
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(vec![(Arc::from("shardId-0"), held)]),
        OWNER,
        now,
        NOW_MS,
    );
    assert!(
        matches!(rig.next(now), Step::Wait(Some(_))),
        "nothing to take"
    );
    // The poll of a store without notices: its list fails, then shows the row still held,
    // then released.
    let mut at = POLL;
    assert!(matches!(rig.next(at), Step::ReadNotice { .. }));
    rig.rounds.notice_read(
        &mut rig.coordinator,
        NoticeRead::Unsupported,
        OWNER,
        at,
        NOW_MS,
    );
    assert!(matches!(rig.next(at), Step::ListRows { .. }));
    rig.rounds
        .rows_listed(&mut rig.coordinator, Listed::Failed, OWNER, at, NOW_MS);
    assert!(
        matches!(rig.next(at), Step::ListShards),
        "a failed poll has a round read the rows in its place"
    );
    rig.rounds.listed(&mut rig.coordinator, Shards::Failed, at);
    // The store keeps no notices: from now on every poll lists the rows at once.
    at += POLL;
    assert!(matches!(rig.next(at), Step::ListRows { .. }));
    let released = Rig::row(None, NOW_MS);
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(vec![(Arc::from("shardId-0"), released)]),
        OWNER,
        at,
        NOW_MS,
    );
    assert!(
        matches!(rig.next(at), Step::ListShards),
        "a round, long before the next listing"
    );
}

#[test]
fn a_wake_starts_a_round_and_a_cancel_ends_the_coordinator_after_the_round() {
    let mut rig = Rig::new();
    let now = Duration::ZERO;
    let _ = rig.next(now);
    rig.rounds.listed(&mut rig.coordinator, Shards::Failed, now);
    assert!(matches!(rig.next(now), Step::Wait(Some(_))));
    rig.rounds.wake();
    let soon = Duration::from_millis(5);
    assert!(
        matches!(rig.next(soon), Step::ListShards),
        "woken: a round at once"
    );
    rig.rounds.cancel();
    assert!(
        matches!(rig.next(soon), Step::Wait(None)),
        "the round under way goes on"
    );
    rig.rounds
        .listed(&mut rig.coordinator, Shards::StreamNotFound, soon);
    assert!(matches!(rig.next(soon), Step::Exit));
}

#[test]
fn an_answer_nothing_asked_for_changes_nothing() {
    let mut rig = Rig::new();
    let now = Duration::ZERO;
    rig.first_listing(now);
    // Answers of calls that were not made: the round waits for its `list` still.
    rig.rounds.took(&mut rig.coordinator, now);
    rig.rounds.rows_read(
        &mut rig.coordinator,
        Rows::new(),
        &HashSet::new(),
        OWNER,
        now,
        NOW_MS,
    );
    rig.rounds.listed(&mut rig.coordinator, Shards::Failed, now);
    assert!(matches!(rig.next(now), Step::Wait(None)));
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(Vec::new()),
        OWNER,
        now,
        NOW_MS,
    );
    assert!(
        matches!(rig.next(now), Step::Take(_)),
        "the round goes on from its own answer"
    );
}

#[test]
fn the_handover_poll_reads_the_notice_and_the_rows_only_once_a_release_bumped_it() {
    let mut rig = Rig::new();
    let now = Duration::ZERO;
    rig.first_listing(now);
    let held = Rig::row(Some("pod-b"), NOW_MS + 10_000);
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(vec![(Arc::from("shardId-0"), held.clone())]),
        OWNER,
        now,
        NOW_MS,
    );
    assert!(matches!(rig.next(now), Step::Wait(Some(_))));
    let notice = |counter| Notice {
        counter,
        beats: [("pod-b".to_owned(), NOW_MS + 9_000)].into(),
        ..Notice::default()
    };
    // The first poll: the notice, this instance's beat (it waits on pod-b), then the rows once.
    let mut at = POLL;
    assert!(matches!(rig.next(at), Step::ReadNotice { .. }));
    assert!(matches!(rig.next(at), Step::Wait(None)), "until it answers");
    rig.rounds.notice_read(
        &mut rig.coordinator,
        NoticeRead::Notice(notice(2)),
        OWNER,
        at,
        NOW_MS,
    );
    let Step::Beat(beat) = rig.next(at) else {
        panic!("a beat");
    };
    assert_eq!(beat.until_ms, NOW_MS + 10_000);
    rig.rounds.beaten(&mut rig.coordinator, OWNER, true);
    assert!(matches!(rig.next(at), Step::ListRows { .. }));
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(vec![(Arc::from("shardId-0"), held)]),
        OWNER,
        at,
        NOW_MS,
    );
    assert!(matches!(rig.next(at), Step::Wait(Some(t)) if t == at + POLL));
    // Nothing moved: the notice is the whole poll (its own beat, written, is fresh).
    at += POLL;
    let mut quiet = notice(2);
    quiet.beats.insert(OWNER.to_owned(), NOW_MS + 10_000);
    assert!(matches!(rig.next(at), Step::ReadNotice { .. }));
    rig.rounds.notice_read(
        &mut rig.coordinator,
        NoticeRead::Notice(quiet.clone()),
        OWNER,
        at,
        NOW_MS,
    );
    assert!(matches!(rig.next(at), Step::Wait(Some(t)) if t == at + POLL));
    // A failed read does nothing.
    at += POLL;
    assert!(matches!(rig.next(at), Step::ReadNotice { .. }));
    rig.rounds
        .notice_read(&mut rig.coordinator, NoticeRead::Failed, OWNER, at, NOW_MS);
    assert!(matches!(rig.next(at), Step::Wait(Some(_))));
    // A release bumped it: the rows, which show the shard free, and a round.
    at += POLL;
    quiet.counter = 3;
    assert!(matches!(rig.next(at), Step::ReadNotice { .. }));
    rig.rounds.notice_read(
        &mut rig.coordinator,
        NoticeRead::Notice(quiet),
        OWNER,
        at,
        NOW_MS,
    );
    assert!(matches!(rig.next(at), Step::ListRows { .. }));
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(vec![(Arc::from("shardId-0"), Rig::row(None, 0))]),
        OWNER,
        at,
        NOW_MS,
    );
    assert!(matches!(rig.next(at), Step::ListShards));
}

#[test]
fn an_instance_waiting_for_no_shard_reads_the_notice_every_renewal_interval() {
    let mut rig = Rig::new();
    let now = Duration::ZERO;
    rig.first_listing(now);
    rig.reading.insert(Arc::from("shardId-0"));
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(Vec::new()),
        OWNER,
        now,
        NOW_MS,
    );
    let Step::Take(_) = rig.next(now) else {
        panic!("the free shard is taken");
    };
    rig.rounds.took(&mut rig.coordinator, now);
    let Step::Wait(Some(first)) = rig.next(now) else {
        panic!("a wait");
    };
    assert!(matches!(rig.next(first), Step::ReadNotice { .. }));
    rig.rounds.notice_read(
        &mut rig.coordinator,
        NoticeRead::Notice(Notice::default()),
        OWNER,
        first,
        NOW_MS,
    );
    let renew = LeaseTimings::default().renew();
    assert!(
        matches!(rig.next(first), Step::Wait(Some(t)) if t == first + renew),
        "alone, it writes no beat and looks again a renewal interval later"
    );
}

/// A balancing rig whose last notice read showed `beats` (its own included), at `now`.
fn balancing_rig_after_notice(beats: &[&str], now: Duration) -> Rig {
    let mut rig = Rig::new();
    rig.coordinator = Coordinator::new(LeaseTimings::default(), KinesisPosition::TrimHorizon)
        .with_balancing(true);
    rig.first_listing(Duration::ZERO);
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(vec![(
            Arc::from("shardId-0"),
            Rig::row(Some("pod-b"), NOW_MS + 60_000),
        )]),
        OWNER,
        Duration::ZERO,
        NOW_MS,
    );
    assert!(matches!(rig.next(Duration::ZERO), Step::Wait(Some(_))));
    assert!(matches!(rig.next(now), Step::ReadNotice { .. }));
    let notice = Notice {
        counter: 1,
        beats: beats
            .iter()
            .map(|owner| ((*owner).to_owned(), NOW_MS + 10_000))
            .collect(),
        ..Notice::default()
    };
    rig.rounds.notice_read(
        &mut rig.coordinator,
        NoticeRead::Notice(notice),
        OWNER,
        now,
        NOW_MS,
    );
    // The notice moved: the poll reads the rows.
    assert!(matches!(rig.next(now), Step::ListRows { .. }));
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(Vec::new()),
        OWNER,
        now,
        NOW_MS,
    );
    rig
}

/// The next round at `now` over `shards`, whose rows are `rows`: what its passes take, and the
/// step after them.
fn round_over(
    rig: &mut Rig,
    now: Duration,
    shards: &[&str],
    rows: Vec<(Arc<str>, LeaseState)>,
) -> (Vec<Arc<str>>, Step<Duration>) {
    rig.rounds.wake();
    loop {
        match rig.next(now) {
            Step::ListShards => break,
            Step::Wait(_) => panic!("no round"),
            _ => {}
        }
    }
    rig.rounds.listed(
        &mut rig.coordinator,
        Shards::Listed(shards.iter().map(|id| shard(id)).collect()),
        now,
    );
    assert!(matches!(rig.next(now), Step::ListRows { .. }));
    rig.rounds
        .rows_listed(&mut rig.coordinator, Listed::Rows(rows), OWNER, now, NOW_MS);
    match rig.next(now) {
        Step::Take(takes) => {
            rig.rounds.took(&mut rig.coordinator, now);
            let taken = takes.into_iter().map(|(shard, _)| shard.id).collect();
            (taken, rig.next(now))
        }
        step => (Vec::new(), step),
    }
}

#[test]
fn a_balancing_instance_takes_free_shards_only_up_to_its_share() {
    let now = POLL;
    let mut rig = balancing_rig_after_notice(&[OWNER, "pod-b"], now);
    let shards = ["shardId-0", "shardId-1", "shardId-2", "shardId-3"];
    let (taken, _) = round_over(&mut rig, now, &shards, Vec::new());
    assert_eq!(
        taken.len(),
        2,
        "half of four, with pod-b beating: {taken:?}"
    );
}

/// The next round at `now` over four shards pod-b holds for another minute.
fn round_over_four_held_by_pod_b(rig: &mut Rig, now: Duration) -> (Vec<Arc<str>>, Step<Duration>) {
    let shards = ["shardId-0", "shardId-1", "shardId-2", "shardId-3"];
    let rows = shards
        .iter()
        .map(|id| (Arc::from(*id), Rig::row(Some("pod-b"), NOW_MS + 60_000)))
        .collect();
    round_over(rig, now, &shards, rows)
}

#[test]
fn a_balancing_instance_asks_the_holder_of_every_shard_for_its_share() {
    let now = POLL;
    let mut rig = balancing_rig_after_notice(&[OWNER, "pod-b"], now);
    let (taken, step) = round_over_four_held_by_pod_b(&mut rig, now);
    assert!(taken.is_empty());
    let Step::Ask(asks) = step else {
        panic!("the round asks for handoffs, not {step:?}");
    };
    assert_eq!(asks.len(), 2, "{asks:?}");
    assert!(asks.iter().all(|ask| ask.holder == "pod-b"));
    assert!(
        matches!(rig.next(now), Step::Wait(None)),
        "until the requests are over"
    );
    rig.rounds.asked(&mut rig.coordinator, now);
    assert!(matches!(rig.next(now), Step::Wait(Some(_))));
}

#[test]
fn a_paused_instance_asks_for_no_handoff() {
    let now = POLL;
    let mut rig = balancing_rig_after_notice(&[OWNER, "pod-b"], now);
    rig.coordinator.set_paused(true);
    // Paused, it takes nothing: a shard handed off to it would only be handed back.
    let (taken, step) = round_over_four_held_by_pod_b(&mut rig, now);
    assert!(taken.is_empty());
    assert!(
        matches!(step, Step::Wait(Some(_))),
        "no handoff is asked for: {step:?}"
    );
}

#[test]
fn an_instance_that_balances_not_asks_nothing_and_takes_everything_free() {
    let mut rig = Rig::new();
    rig.first_listing(Duration::ZERO);
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(Vec::new()),
        OWNER,
        Duration::ZERO,
        NOW_MS,
    );
    let Step::Take(takes) = rig.next(Duration::ZERO) else {
        panic!("a take");
    };
    assert_eq!(takes.len(), 1);
    rig.rounds.took(&mut rig.coordinator, Duration::ZERO);
    assert!(rig.coordinator.take_asks().is_empty());
}

#[test]
fn rows_answered_after_a_freeze_longer_than_a_lease_are_read_again_not_taken_on() {
    let mut rig = Rig::new();
    rig.first_listing(Duration::ZERO);
    // The process froze between the read and its answer: the row the answer lacks may have
    // been deleted since, and a take would create it afresh.
    let thawed = LeaseTimings::default().lease() + Duration::from_secs(1);
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(Vec::new()),
        OWNER,
        thawed,
        NOW_MS,
    );
    assert!(
        matches!(rig.next(thawed), Step::ListShards),
        "a round reads them again"
    );
}

/// A rig whose run is `mine`, with the handover poll every `poll` (`ZERO`: off), after its first
/// round (one shard, which it reads).
fn twin_rig(mine: Incarnation, poll: Duration) -> Rig {
    // Listing rounds far apart: the looks at the notice are what the tests step through.
    let listing = Duration::from_secs(3600);
    let timings = LeaseTimings::default()
        .with_handover_poll_interval(poll)
        .with_listing_interval(listing);
    let mut rig = Rig {
        rounds: Rounds::new(listing, poll, Duration::ZERO),
        coordinator: Coordinator::new(timings, KinesisPosition::TrimHorizon).with_incarnation(mine),
        reading: HashSet::new(),
    };
    rig.first_listing(Duration::ZERO);
    rig.reading.insert(Arc::from("shardId-0"));
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(Vec::new()),
        OWNER,
        Duration::ZERO,
        NOW_MS,
    );
    assert!(matches!(rig.next(Duration::ZERO), Step::Take(_)));
    rig.rounds.took(&mut rig.coordinator, Duration::ZERO);
    rig
}

/// The notice that shows `run`'s record under this instance's owner id (`None`: nothing).
fn notice_of(run: Option<Incarnation>) -> Notice {
    Notice {
        incarnations: run
            .map(|run| (OWNER.to_owned(), run.record(NOW_MS)))
            .into_iter()
            .collect(),
        ..Notice::default()
    }
}

impl Rig {
    /// The next look at the notice, due by `at`, read at `now_ms`: answers `notice`.
    fn look(&mut self, at: Duration, now_ms: u64, notice: Notice) -> Duration {
        self.look_read(at, now_ms, notice).0
    }

    /// [`look`](Self::look), and whether the read was asked for consistent.
    fn look_read(&mut self, at: Duration, now_ms: u64, notice: Notice) -> (Duration, bool) {
        let (due, consistent) = match self.next(at) {
            Step::Wait(Some(due)) => {
                let Step::ReadNotice { consistent, .. } = self.next(due) else {
                    panic!("a look at the notice");
                };
                (due, consistent)
            }
            Step::ReadNotice { consistent, .. } => (at, consistent),
            other => panic!("a look at the notice, or a wait for it: {other:?}"),
        };
        self.rounds.notice_read(
            &mut self.coordinator,
            NoticeRead::Notice(notice),
            OWNER,
            due,
            now_ms,
        );
        (due, consistent)
    }

    /// The next step writes this run's record; it lands at `now_ms`.
    fn records(&mut self, at: Duration, now_ms: u64) -> String {
        let Step::Announce { record, .. } = self.next(at) else {
            panic!("this run's record");
        };
        assert!(
            matches!(self.next(at), Step::Wait(None)),
            "until it answers"
        );
        self.rounds.announced(&mut self.coordinator, true, now_ms);
        record
    }
}

#[test]
fn the_later_of_two_live_runs_pauses_until_the_earlier_is_gone() {
    let early = Incarnation::new(NOW_MS - 60_000, 1);
    let late = Incarnation::new(NOW_MS, 2);
    let mut rig = twin_rig(late, POLL);
    // The first look finds the crashed run's record: it records its own, judging nothing.
    let at = rig.look(Duration::ZERO, NOW_MS, notice_of(Some(early)));
    let record = rig.records(at, NOW_MS);
    assert!(record.starts_with(&format!("{late}@")), "{record}");
    // Its own record: nothing to say, nothing written.
    let at = rig.look(at, NOW_MS + 1_000, notice_of(Some(late)));
    assert!(matches!(rig.next(at), Step::Wait(Some(_))));
    // The earlier run wrote its record after this one's landed: it is alive. (The read is
    // consistent: this run does not know its peers yet. A read behind would judge nothing and
    // have the next poll read consistent: `machine::tests::a_record_in_doubt_is_judged_at_the_
    // next_poll_on_a_consistent_whole_read`.)
    let (at, consistent) = rig.look_read(at, NOW_MS + 2_000, notice_of(Some(early)));
    assert!(consistent, "the reads that settle the peers are consistent");
    let Step::Twin(TwinNews::Earlier(twin)) = rig.next(at) else {
        panic!("told of the earlier run");
    };
    assert_eq!((twin.mine, twin.theirs), (late, early));
    // Paused: its record again (for the earlier to answer), and the coordinator goes on.
    rig.records(at, NOW_MS + 2_000);
    assert_eq!(rig.coordinator.paused_for(), Some(early));
    assert!(matches!(rig.next(at), Step::Wait(Some(_))));
    // The instance paused: a round takes nothing, though the shard is free.
    rig.coordinator.set_paused(true);
    rig.reading.clear();
    rig.rounds.wake();
    assert!(matches!(rig.next(at), Step::ListShards));
    rig.rounds.listed(
        &mut rig.coordinator,
        Shards::Listed(vec![shard("shardId-0")]),
        at,
    );
    assert!(matches!(rig.next(at), Step::ListRows { .. }));
    rig.rounds.rows_listed(
        &mut rig.coordinator,
        Listed::Rows(vec![(Arc::from("shardId-0"), Rig::row(None, 0))]),
        OWNER,
        at,
        NOW_MS + 12_000,
    );
    let step = rig.next(at);
    assert!(
        matches!(step, Step::Wait(Some(_))),
        "nothing taken while paused: {step:?}"
    );
    // Its record stood a whole lease unanswered: the earlier run is gone.
    let lease = millis(LeaseTimings::default().lease());
    let at = rig.look(at, NOW_MS + 2_000 + lease, notice_of(Some(late)));
    let Step::Twin(TwinNews::Gone(twin)) = rig.next(at) else {
        panic!("told the earlier run is gone");
    };
    assert_eq!(twin.theirs, early);
    assert_eq!(rig.coordinator.paused_for(), None);
}

#[test]
fn the_earlier_run_keeps_going_and_answers_the_later_once_told() {
    let early = Incarnation::new(NOW_MS - 60_000, 1);
    let late = Incarnation::new(NOW_MS, 2);
    let mut rig = twin_rig(early, POLL);
    let at = rig.look(Duration::ZERO, NOW_MS, notice_of(None));
    assert!(matches!(rig.next(at), Step::Announce { .. }));
    // A failed write may not have landed: nothing is judged until one is answered.
    rig.rounds.announced(&mut rig.coordinator, false, NOW_MS);
    let at = rig.look(at, NOW_MS + 1_000, notice_of(Some(late)));
    rig.records(at, NOW_MS + 1_000);
    let at = rig.look(at, NOW_MS + 2_000, notice_of(Some(late)));
    let Step::Twin(TwinNews::Later(twin)) = rig.next(at) else {
        panic!("told of the later run");
    };
    assert_eq!(twin.theirs, late);
    // Its record again, for the later run to read; told of once, answered every time.
    rig.records(at, NOW_MS + 2_000);
    assert!(matches!(rig.next(at), Step::Wait(Some(_))), "it goes on");
    let at = rig.look(at, NOW_MS + 3_000, notice_of(Some(late)));
    rig.records(at, NOW_MS + 3_000);
    assert_eq!(rig.coordinator.paused_for(), None);
}

#[test]
fn with_the_handover_poll_off_the_notice_is_read_for_the_twins_alone() {
    let early = Incarnation::new(NOW_MS - 60_000, 1);
    let late = Incarnation::new(NOW_MS, 2);
    let mut rig = twin_rig(late, Duration::ZERO);
    let renew = LeaseTimings::default().renew();
    let mut others = notice_of(None);
    // A bumped counter and another instance's beat: with the poll off neither asks for a beat
    // or a read of the rows.
    others.counter = 7;
    others.beats.insert("pod-b".to_owned(), NOW_MS + 9_000);
    let first = rig.look(Duration::ZERO, NOW_MS, others.clone());
    assert_eq!(
        first,
        Duration::ZERO,
        "the first look right after the first round"
    );
    rig.records(first, NOW_MS);
    let Step::Wait(Some(due)) = rig.next(first) else {
        panic!("a wait");
    };
    assert_eq!(due, first + renew, "the next look a renewal interval later");
    others.incarnations = notice_of(Some(early)).incarnations;
    let at = rig.look(first, NOW_MS + 3_000, others);
    assert!(matches!(rig.next(at), Step::Twin(TwinNews::Earlier(_))));
}

mod steady;

impl Rig {
    /// A rig whose fleet takes `budget` shards a second, at `now` past its first listing of
    /// `count` new shards and of a table with no rows: its round passes next.
    fn listed_fresh(budget: u64, count: usize, now: Duration) -> Self {
        let mut rig = Rig::new();
        rig.coordinator = Coordinator::new(LeaseTimings::default(), KinesisPosition::TrimHorizon)
            .with_take_budget(budget)
            .without_waiting_for_peers();
        rig.first_listing_of(count, now);
        rig.no_rows_listed(now);
        rig
    }

    /// The rows' `list` answered at `now`: the table has no rows.
    fn no_rows_listed(&mut self, now: Duration) {
        self.rounds.rows_listed(
            &mut self.coordinator,
            Listed::Rows(Vec::new()),
            OWNER,
            now,
            NOW_MS + millis(now),
        );
    }
}

#[test]
fn a_rounds_takes_go_out_as_the_pace_allows_with_the_poll_between_and_the_next_round_plans_again() {
    let now = Duration::ZERO;
    // The fleet takes two shards a second, this instance alone: two at once, then one every 500 ms.
    let mut rig = Rig::listed_fresh(2, 8, now);
    let Step::Take(first) = rig.next(now) else {
        panic!("the takes the pace allows go out");
    };
    assert_eq!(first.len(), 2, "{first:?}");
    let end = Duration::from_millis(100);
    rig.rounds.took(&mut rig.coordinator, end);
    // The round is over (its asks and deletions went ahead); six takes wait for the pace.
    let Step::Wait(Some(until)) = rig.next(end) else {
        panic!("a wait for the pace");
    };
    assert_eq!(until, Duration::from_millis(500));
    assert!(rig.rounds.first_round_over());
    assert_eq!(rig.rounds.paced_takes(), 6);
    let mut taken = first.len();
    let mut at = until;
    let mut polled = false;
    while taken < 8 {
        match rig.next(at) {
            Step::Take(batch) => {
                assert_eq!(batch.len(), 1, "one take a refill at {at:?}");
                taken += batch.len();
                rig.rounds.took(&mut rig.coordinator, at);
            }
            Step::ReadNotice { .. } => {
                // The poll runs while takes wait for the pace.
                polled = true;
                rig.rounds.notice_read(
                    &mut rig.coordinator,
                    NoticeRead::Failed,
                    OWNER,
                    at,
                    NOW_MS + millis(at),
                );
            }
            Step::Wait(Some(next)) => {
                assert!(next > at, "{next:?} after {at:?}");
                at = next;
            }
            other => panic!("{other:?} at {at:?}"),
        }
        assert!(at < LISTING, "every take out before the next listing");
    }
    assert_eq!(rig.rounds.paced_takes(), 0);
    assert!(polled, "the poll ran between the paced takes");
    assert!(
        at >= Duration::from_millis(3_000),
        "six takes at two a second: {at:?}"
    );

    // A round due while takes wait plans again on the rows it reads: the queue goes.
    let mut rig = Rig::listed_fresh(1, 30, now);
    assert!(matches!(rig.next(now), Step::Take(batch) if batch.len() == 1));
    rig.rounds.took(&mut rig.coordinator, end);
    assert!(matches!(rig.next(end), Step::Wait(Some(_))));
    assert_eq!(rig.rounds.paced_takes(), 29);
    rig.rounds.wake();
    assert!(matches!(rig.next(end), Step::ListShards), "a woken round");
    assert_eq!(rig.rounds.paced_takes(), 0, "the round plans again");
}

/// Found by review (eleventh session): a batch of takes that lasted long enough for the pace to
/// refill went straight on to the next batch, and so on until the queue was empty, so a cancel
/// (or a pause for an earlier run under the owner id, or a round due) between batches waited for
/// the whole queue: 20 s at 10,000 shards and 10 instances. Every batch after a round's first
/// goes out from between the rounds, where those come first.
#[test]
fn a_cancel_between_paced_batches_stops_the_takes_at_once() {
    let now = Duration::ZERO;
    let mut rig = Rig::listed_fresh(2, 8, now);
    assert!(matches!(rig.next(now), Step::Take(batch) if batch.len() == 2));
    // The batch took a second: the pace refilled two takes meanwhile.
    let end = Duration::from_secs(1);
    rig.rounds.cancel();
    rig.rounds.took(&mut rig.coordinator, end);
    let step = rig.next(end);
    assert!(matches!(step, Step::Exit), "{step:?}");
}

/// Found by review (eleventh session): a seek made while no shard is held moves where shards
/// without a checkpoint start, but takes queued for the pace had their start planned before it.
/// The queue goes, and a round plans again.
#[test]
fn a_seek_while_takes_wait_for_the_pace_plans_them_again() {
    let now = Duration::ZERO;
    let mut rig = Rig::listed_fresh(1, 30, now);
    assert!(matches!(rig.next(now), Step::Take(batch) if batch.len() == 1));
    let end = Duration::from_millis(100);
    rig.rounds.took(&mut rig.coordinator, end);
    assert!(matches!(rig.next(end), Step::Wait(Some(_))));
    assert_eq!(rig.rounds.paced_takes(), 29);
    rig.coordinator.start_at(KinesisPosition::Latest);
    let step = rig.next(end);
    assert!(matches!(step, Step::ListShards), "{step:?}");
    assert_eq!(rig.rounds.paced_takes(), 0, "the queue went");
}

/// Issue 29, item 4: takes queued before the instance knew its peers take every shard never
/// taken (alone, by what it knew, each was its turn); once it knows them (a renewal interval
/// after a notice showed its beat and the others'), a round plans again on their turns rather
/// than racing them for a listing interval.
#[test]
fn takes_queued_before_the_peers_were_known_are_planned_again_once_they_are() {
    let now = Duration::ZERO;
    let blind = (crate::coordinator::take_pace::FLEET_TAKES_PER_SECOND
        / crate::coordinator::take_pace::PEERS_UNKNOWN as u64) as usize;
    let mut rig = Rig::new();
    rig.first_listing_of(100, now);
    rig.no_rows_listed(now);
    let Step::Take(first) = rig.next(now) else {
        panic!("the takes the pace allows go out");
    };
    assert_eq!(
        first.len(),
        blind,
        "a fortieth of the budget, peers unknown"
    );
    // Its takes are read from here on.
    rig.reading
        .extend(first.iter().map(|(shard, _)| Arc::clone(&shard.id)));
    let end = Duration::from_millis(100);
    rig.rounds.took(&mut rig.coordinator, end);
    assert_eq!(rig.rounds.paced_takes(), 100 - blind);
    // The first notice shows nobody's beat: the instance writes its own (a lone instance whose
    // queued takes kept it from watching never beat, and took at a twentieth of the budget
    // for good, the review found), and the next ones show it beside pod-b's.
    let mut notices = 0;
    let mut beaten = false;
    let turns = crate::coordinator::turns::Turns::new(OWNER, ["pod-b"]);
    let renew = crate::LeaseTimings::default().renew();
    let (mut at, mut noticed, mut replanned) = (end, None::<Duration>, false);
    let (mut before_known, mut after_known) = (0, Vec::new());
    while at < Duration::from_secs(8) {
        let known = noticed.map(|noticed| noticed + renew);
        match rig.next(at) {
            Step::Wait(Some(next)) => at = next,
            Step::Take(batch) => {
                if known.is_some_and(|known| at < known) {
                    before_known += batch.len();
                }
                // Within the grace after it knows (two polls): the others' turns wait for it.
                if known.is_some_and(|known| at >= known && at < known + POLL * 2) {
                    after_known.extend(batch.iter().map(|(shard, _)| shard.id.to_string()));
                }
                rig.reading
                    .extend(batch.iter().map(|(shard, _)| Arc::clone(&shard.id)));
                rig.rounds.took(&mut rig.coordinator, at);
            }
            Step::ReadNotice { .. } => {
                notices += 1;
                let notice = if notices == 1 {
                    Notice::default()
                } else {
                    noticed.get_or_insert(at);
                    Notice::beating(&[OWNER, "pod-b"], NOW_MS + millis(at) + 10_000)
                };
                rig.rounds.notice_read(
                    &mut rig.coordinator,
                    NoticeRead::Notice(notice),
                    OWNER,
                    at,
                    NOW_MS + millis(at),
                );
            }
            Step::Beat(_) => {
                beaten = true;
                rig.rounds.beaten(&mut rig.coordinator, OWNER, true);
            }
            Step::ListShards => {
                replanned |= known.is_some_and(|known| at >= known);
                let listing: Vec<ShardInfo> =
                    (0..100).map(|n| shard(&format!("shardId-{n}"))).collect();
                rig.rounds
                    .listed(&mut rig.coordinator, Shards::Listed(listing), at);
            }
            Step::ListRows { .. } => rig.no_rows_listed(at),
            step => panic!("{step:?} at {at:?}"),
        }
    }
    assert!(beaten, "it wrote its beat");
    assert!(
        noticed.is_some() && replanned,
        "a round planned again once it knew"
    );
    // Its own beat and pod-b's shown, it still takes as one of many for a renewal interval:
    // pod-b's first notice may not have shown anyone else's yet.
    let seconds = renew.as_secs() as usize;
    assert!(
        before_known <= blind * (seconds + 1),
        "{before_known} takes in the {renew:?} before it knew its peers"
    );
    assert!(
        !after_known.is_empty() && after_known.iter().all(|id| turns.is_mine(id)),
        "once the peers are known, only its turns: {after_known:?}"
    );
}
