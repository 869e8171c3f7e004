//! A test suite every [`LeaseStore`] must pass: the lease protocol, checked against a live store.
//!
//! [`run`] drives one store through the protocol the rest of the crate relies on: a live lease
//! is exclusive, an expired one can be taken (but only once it lies [`SKEW_TOLERANCE`] in the
//! past), a writer that lost its lease is fenced out of renewals, checkpoints and releases, a
//! release keeps the checkpoint and frees the shard at once, [`SHARD_END`] reads back as
//! finished, every write bumps the counter, shards of different streams are different rows
//! even when their ids are equal, a checkpoint with renewal pushes the expiry out and is fenced
//! like a checkpoint, and a store that lists a stream's rows lists exactly those.
//!
//! Every run uses stream names with a random suffix, so the suite can run again and again
//! against one persistent table (a DynamoDB table shared by several test runs, for example). It
//! waits in real time for leases to expire, so callers pass a short `lease`: a run takes about
//! `lease + SKEW_TOLERANCE` plus a few hundred milliseconds, and the store calls themselves.
//!
//! # Examples
//!
//! A store on another database runs the suite from its own tests:
//!
//! ```
//! use std::time::Duration;
//! use ruststream_kinesis::MemoryLeaseStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! ruststream_kinesis::lease::suite::run(&MemoryLeaseStore::new(), Duration::from_millis(200)).await;
//! # }
//! ```

use std::fmt::Debug;
use std::time::Duration;

use super::{
    LeaseError, LeaseKey, LeaseState, LeaseStore, Notice, SHARD_END, SKEW_TOLERANCE, epoch_millis,
    millis,
};

/// The first owner of every check.
const A: &str = "suite-owner-a";
/// The second owner of every check.
const B: &str = "suite-owner-b";
/// The shard id every check uses; shard ids repeat across streams, and so do they here.
const SHARD: &str = "shardId-000000000000";
/// How long past `lease + SKEW_TOLERANCE` the suite waits before it expects a lease to be free,
/// to absorb timer and millisecond rounding.
const MARGIN: Duration = Duration::from_millis(300);

/// Runs every check of the lease protocol against `store`, with leases of `lease`.
///
/// Panics on the first check that fails, with a message that names the check and says what the
/// store answered. Keys are unique to each run (stream names carry a random suffix), so the suite
/// may run repeatedly against one table, and concurrently with other runs. The expiry check
/// sleeps in real time for `lease + SKEW_TOLERANCE` and a small margin, so keep `lease` short
/// (a few hundred milliseconds in memory, a second against a remote store).
///
/// The checks:
/// - `read-missing`: reading a row that was never written answers `None`;
/// - `exclusivity`: a second owner cannot take a live lease (it gets [`LeaseError::Held`]
///   naming the holder), the holder can take it again, and nobody else can renew, checkpoint or
///   release it ([`LeaseError::Lost`]);
/// - `racing-takes`: several owners take one free row (new, or released) at the same moment,
///   round after round: exactly one take succeeds each time, the others get
///   [`LeaseError::Held`] naming it, and the row reads back as the winner's (a store whose
///   conditional write is not atomic lets two instances read one shard at once; the takes go
///   through the one `store` given, so what this catches is a backend's race, not one between
///   clients that a store would serialise);
/// - `missing-row-writes`: renewing, checkpointing or releasing a row that does not exist fails
///   with [`LeaseError::Lost`] and creates nothing;
/// - `counter`: reads show the owner and checkpoint as written, and the counter grows with every
///   write;
/// - `expiry`: a lease whose expiry lies less than [`SKEW_TOLERANCE`] in the past is still held;
///   after `lease + SKEW_TOLERANCE` another owner takes it and resumes at its checkpoint;
/// - `fencing`: once the lease was taken, the old owner's renewal, checkpoint and release each
///   fail with [`LeaseError::Lost`], and its checkpoint leaves the row unchanged;
/// - `release`: a release clears the owner, keeps the checkpoint, and lets another owner take
///   the shard at once;
/// - `shard-end`: a [`SHARD_END`] checkpoint reads back as finished;
/// - `streams`: the same shard id in two streams is two rows, with owners and checkpoints of
///   their own;
/// - `take-from-start`: a take with a start records it as the checkpoint of a row without one,
///   keeps the checkpoint of a row that has one (a sequence number or [`SHARD_END`]), and a
///   refused take writes nothing;
/// - `checkpoint-renewing` and `listing`: the provided calls, as the crate's stores do them;
/// - `checkpoint-lag` (for a store that keeps it): the figure written with a checkpoint
///   ([`LeaseState::behind_ms`]) reads back with it, and a checkpoint without one, or a final
///   checkpoint, removes it;
/// - `deletion` (for a store that deletes): a row is deleted only with the counter it holds and
///   no unexpired lease, reads back as missing, and can be taken afresh;
/// - `notices` (for a store whose [`notice`](LeaseStore::notice) answers): a stream's notice
///   starts empty, a release bumps its counter and a refused one does not, a beat reads back and
///   removes the beats it names that lapsed but never a live one, an older beat landing after a
///   newer one moves nothing back, a leave removes the leaver's beat and bumps the counter, and
///   the notice row is no row of a shard: a listing of the stream shows only the shards' rows;
/// - `handoff` (for a store that records handoffs): a request is recorded only on a row
///   its named holder holds, bumps no counter (the holder's own writes still land), shows in the
///   holder's renewal and in reads, is not replaced by another asker's while it stands; the
///   handoff (`hand_over`) is refused for an instance the request does not name and for a
///   non-holder, and otherwise makes the asker the owner with the final checkpoint, removes the
///   request, and bumps the counter; the asker's take of the handed row succeeds, and any take
///   removes a request;
/// - `take-over` (for a store that implements [`take_over`](LeaseStore::take_over)): a
///   take-over of a live row is refused unless the row still names the holder and the counter
///   given, is then accepted whatever the expiry (the row becomes the taker's, the counter
///   bumped, the checkpoint kept), a second take-over decided on the same row is refused, of
///   several sent at once exactly one lands, and a take-over of a missing row fails.
///
/// # Panics
///
/// When `store` breaks the protocol, or a call fails for any other reason.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ruststream_kinesis::MemoryLeaseStore;
/// use ruststream_kinesis::lease::suite;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// suite::run(&MemoryLeaseStore::new(), Duration::from_millis(200)).await;
/// # }
/// ```
pub async fn run(store: &dyn LeaseStore, lease: Duration) {
    let run = Run::new(store, lease);
    run.read_missing().await;
    run.exclusivity().await;
    run.racing_takes().await;
    run.missing_row_writes().await;
    run.counter().await;
    run.expiry_and_fencing().await;
    run.released_rows().await;
    run.shard_end().await;
    run.streams().await;
    run.checkpoint_renewing().await;
    run.take_from_start().await;
    run.listing().await;
    run.notices().await;
    run.handoff().await;
    run.deletion().await;
    run.take_over().await;
}

/// One run of the suite: the store, the lease, and the run's unique stream prefix.
struct Run<'s> {
    store: &'s dyn LeaseStore,
    lease: Duration,
    prefix: String,
}

impl<'s> Run<'s> {
    fn new(store: &'s dyn LeaseStore, lease: Duration) -> Self {
        Self {
            store,
            lease,
            prefix: format!("suite-{:016x}", rand::random::<u64>()),
        }
    }

    /// A key of this run, for the check `check`.
    fn key(&self, check: &str) -> LeaseKey {
        LeaseKey::new(format!("{}-{check}", self.prefix), SHARD)
    }

    fn lease_ms(&self) -> u64 {
        millis(self.lease)
    }

    async fn acquire(&self, check: &str, key: &LeaseKey, owner: &str) -> LeaseState {
        let before = epoch_millis();
        let state = ok(
            check,
            &format!("{owner} acquires {key}"),
            self.store.acquire(key, owner, self.lease).await,
        );
        let after = epoch_millis();
        expect(
            check,
            state.is_held_by(owner),
            &format!("{owner} acquired {key}, yet the state returned names owner {state:?}"),
        );
        self.expect_expiry(
            check,
            &format!("{owner} acquired {key}"),
            &state,
            before,
            after,
        );
        state
    }

    async fn renew(&self, check: &str, key: &LeaseKey, owner: &str) -> LeaseState {
        let before = epoch_millis();
        let state = ok(
            check,
            &format!("{owner} renews {key}"),
            self.store.renew(key, owner, self.lease).await,
        );
        let after = epoch_millis();
        expect(
            check,
            state.is_held_by(owner),
            &format!("{owner} renewed {key}, yet the state returned is {state:?}"),
        );
        self.expect_expiry(
            check,
            &format!("{owner} renewed {key}"),
            &state,
            before,
            after,
        );
        state
    }

    /// The expiry of a write made between `before` and `after` is `lease` from then, give or take
    /// the skew tolerance (a store may stamp it with its own clock).
    fn expect_expiry(&self, check: &str, what: &str, state: &LeaseState, before: u64, after: u64) {
        let slack = millis(SKEW_TOLERANCE);
        let low = before.saturating_add(self.lease_ms()).saturating_sub(slack);
        let high = after.saturating_add(self.lease_ms()).saturating_add(slack);
        expect(
            check,
            (low..=high).contains(&state.expiry_ms),
            &format!(
                "{what}: expiry {} is not the lease ({} ms) from now (expected {low}..={high})",
                state.expiry_ms,
                self.lease_ms()
            ),
        );
    }

    async fn checkpoint(&self, check: &str, key: &LeaseKey, owner: &str, checkpoint: &str) {
        ok(
            check,
            &format!("{owner} checkpoints {checkpoint:?} on {key}"),
            self.store.checkpoint(key, owner, checkpoint).await,
        );
    }

    async fn release(&self, check: &str, key: &LeaseKey, owner: &str) {
        ok(
            check,
            &format!("{owner} releases {key}"),
            self.store.release(key, owner).await,
        );
    }

    async fn read(&self, check: &str, key: &LeaseKey) -> LeaseState {
        let row = ok(check, &format!("read {key}"), self.store.read(key).await);
        row.unwrap_or_else(|| {
            fail(
                check,
                &format!("read {key} answered None after writes to it"),
            )
        })
    }

    /// Reads `key` and checks its owner, checkpoint, and that the counter moved past `counter`.
    async fn read_expecting(
        &self,
        check: &str,
        key: &LeaseKey,
        owner: Option<&str>,
        checkpoint: Option<&str>,
        counter_above: u64,
    ) -> LeaseState {
        let row = self.read(check, key).await;
        expect(
            check,
            row.owner.as_deref() == owner,
            &format!("read {key}: owner is {:?}, expected {owner:?}", row.owner),
        );
        expect(
            check,
            row.checkpoint.as_deref() == checkpoint,
            &format!(
                "read {key}: checkpoint is {:?}, expected {checkpoint:?}",
                row.checkpoint
            ),
        );
        expect(
            check,
            row.counter > counter_above,
            &format!(
                "read {key}: counter is {}, expected it above {counter_above} after a write",
                row.counter
            ),
        );
        row
    }

    async fn expect_held(&self, check: &str, key: &LeaseKey, taker: &str, holder: &str) {
        match self.store.acquire(key, taker, self.lease).await {
            Err(LeaseError::Held {
                key: held,
                owner,
                expires_in_ms,
            }) => {
                expect(
                    check,
                    held == *key,
                    &format!("{taker} acquiring {key}: Held names key {held}"),
                );
                expect(
                    check,
                    owner == holder,
                    &format!("{taker} acquiring {key}: Held names owner {owner:?}, not {holder:?}"),
                );
                let bound = self.lease_ms().saturating_add(millis(SKEW_TOLERANCE));
                expect(
                    check,
                    expires_in_ms <= bound,
                    &format!(
                        "{taker} acquiring {key}: Held says the lease runs another {expires_in_ms} \
                         ms, longer than the lease ({} ms)",
                        self.lease_ms()
                    ),
                );
            }
            other => fail(
                check,
                &format!(
                    "{taker} acquiring {key} held by {holder:?} should fail with \
                     LeaseError::Held naming {holder:?}, got {other:?}"
                ),
            ),
        }
    }

    async fn expect_lost<T: Debug>(
        &self,
        check: &str,
        what: &str,
        key: &LeaseKey,
        owner: &str,
        result: Result<T, LeaseError>,
    ) {
        match result {
            Err(LeaseError::Lost {
                key: lost,
                owner: refused,
            }) => {
                expect(
                    check,
                    lost == *key && refused == owner,
                    &format!(
                        "{what}: Lost names {lost} and {refused:?}, expected {key} and {owner:?}"
                    ),
                );
            }
            other => fail(
                check,
                &format!("{what} should fail with LeaseError::Lost, got {other:?}"),
            ),
        }
    }

    /// `read-missing`: a row never written reads as `None`.
    async fn read_missing(&self) {
        let check = "read-missing";
        let key = self.key(check);
        let row = ok(check, &format!("read {key}"), self.store.read(&key).await);
        expect(
            check,
            row.is_none(),
            &format!("read of {key}, never written, answered {row:?} instead of None"),
        );
    }

    /// `exclusivity`: one live owner; the holder may take it again; others are fenced.
    async fn exclusivity(&self) {
        let check = "exclusivity";
        let key = self.key(check);
        let first = self.acquire(check, &key, A).await;
        expect(
            check,
            first.checkpoint.is_none(),
            &format!("a new row {key} has checkpoint {:?}", first.checkpoint),
        );
        self.expect_held(check, &key, B, A).await;
        let again = self.acquire(check, &key, A).await;
        expect(
            check,
            again.counter > first.counter,
            &format!(
                "{A} took {key} again: counter {} did not grow past {}",
                again.counter, first.counter
            ),
        );
        let what = format!("{B} renewing {key} held by {A}");
        self.expect_lost(
            check,
            &what,
            &key,
            B,
            self.store.renew(&key, B, self.lease).await,
        )
        .await;
        let what = format!("{B} checkpointing {key} held by {A}");
        self.expect_lost(
            check,
            &what,
            &key,
            B,
            self.store.checkpoint(&key, B, "13").await,
        )
        .await;
        let what = format!("{B} releasing {key} held by {A}");
        self.expect_lost(check, &what, &key, B, self.store.release(&key, B).await)
            .await;
        let row = self.read(check, &key).await;
        expect(
            check,
            row == again,
            &format!(
                "refused writes by {B} changed {key}: it reads {row:?}, was {again:?} after {A} \
                 took it"
            ),
        );
    }

    /// `racing-takes`: of several takes of one free row sent at once, exactly one lands.
    async fn racing_takes(&self) {
        let check = "racing-takes";
        // A take that lands twice is a matter of timing: enough rounds that a store with a
        // non-atomic conditional write is caught (moto's threaded server let both of two
        // simultaneous takes land in about one round in 30).
        const ROUNDS: usize = 60;
        const TAKERS: [&str; 4] = [A, B, "suite-owner-c", "suite-owner-d"];
        for round in 0..ROUNDS {
            let key = self.key(&format!("{check}-{round}"));
            // Odd rounds race for a released row, even ones for a row not yet written.
            if round % 2 == 1 {
                self.acquire(check, &key, A).await;
                self.release(check, &key, A).await;
            }
            let takes = TAKERS
                .iter()
                .map(|owner| self.store.acquire(&key, owner, self.lease));
            let answers = futures::future::join_all(takes).await;
            let mut winners = Vec::new();
            let mut named = Vec::new();
            for (owner, answer) in TAKERS.iter().zip(answers) {
                match answer {
                    Ok(state) => winners.push((*owner, state)),
                    Err(LeaseError::Held { owner: holder, .. }) => named.push((*owner, holder)),
                    Err(err) => fail(
                        check,
                        &format!("{owner}'s take of {key}, racing others, failed: {err}"),
                    ),
                }
            }
            let [(winner, won)] = winners.as_slice() else {
                fail(
                    check,
                    &format!(
                        "round {round}: {} of {} simultaneous takes of the free row {key} \
                         succeeded ({:?}); exactly one may (the store's conditional write is not \
                         atomic)",
                        winners.len(),
                        TAKERS.len(),
                        winners.iter().map(|(owner, _)| owner).collect::<Vec<_>>()
                    ),
                )
            };
            for (loser, holder) in &named {
                expect(
                    check,
                    holder == winner,
                    &format!(
                        "round {round}: {loser}'s take of {key} was refused naming {holder:?}, \
                         yet {winner} won the race"
                    ),
                );
            }
            let row = self.read(check, &key).await;
            expect(
                check,
                row.is_held_by(winner) && row.counter == won.counter,
                &format!(
                    "round {round}: {winner} won the race for {key} (counter {}), yet the row \
                     reads {row:?}",
                    won.counter
                ),
            );
        }
    }

    /// `missing-row-writes`: writes that need a holder fail on a row that does not exist.
    async fn missing_row_writes(&self) {
        let check = "missing-row-writes";
        let key = self.key(check);
        let what = format!("{A} renewing {key}, which does not exist");
        self.expect_lost(
            check,
            &what,
            &key,
            A,
            self.store.renew(&key, A, self.lease).await,
        )
        .await;
        let what = format!("{A} checkpointing {key}, which does not exist");
        self.expect_lost(
            check,
            &what,
            &key,
            A,
            self.store.checkpoint(&key, A, "1").await,
        )
        .await;
        let what = format!("{A} releasing {key}, which does not exist");
        self.expect_lost(check, &what, &key, A, self.store.release(&key, A).await)
            .await;
        let row = ok(check, &format!("read {key}"), self.store.read(&key).await);
        expect(
            check,
            row.is_none(),
            &format!("refused writes created row {key}: {row:?}"),
        );
    }

    /// `counter`: every write shows in a read, and bumps the counter.
    async fn counter(&self) {
        let check = "counter";
        let key = self.key(check);
        let taken = self.acquire(check, &key, A).await;
        let row = self.read(check, &key).await;
        expect(
            check,
            row == taken,
            &format!("read {key} answered {row:?}, but acquire returned {taken:?}"),
        );
        self.checkpoint(check, &key, A, "100").await;
        let row = self
            .read_expecting(check, &key, Some(A), Some("100"), taken.counter)
            .await;
        let renewed = self.renew(check, &key, A).await;
        expect(
            check,
            renewed.counter > row.counter && renewed.checkpoint.as_deref() == Some("100"),
            &format!("{A} renewed {key}: got {renewed:?}, after {row:?}"),
        );
        let row = self.read(check, &key).await;
        expect(
            check,
            row == renewed,
            &format!("read {key} answered {row:?}, but renew returned {renewed:?}"),
        );
        // A checkpoint inside a KPL aggregate (user record 7 of the aggregate at 150) reads
        // back as written, and so does the next one past it.
        self.checkpoint(check, &key, A, "150:7").await;
        let inside = self
            .read_expecting(check, &key, Some(A), Some("150:7"), renewed.counter)
            .await;
        self.checkpoint(check, &key, A, "200").await;
        let row = self
            .read_expecting(check, &key, Some(A), Some("200"), inside.counter)
            .await;
        let again = self.acquire(check, &key, A).await;
        expect(
            check,
            again.counter > row.counter && again.checkpoint.as_deref() == Some("200"),
            &format!("{A} took {key} again: got {again:?}, after {row:?}"),
        );
        self.release(check, &key, A).await;
        self.read_expecting(check, &key, None, Some("200"), again.counter)
            .await;
    }

    /// `expiry` and `fencing`: an expired lease passes to another owner, and the old owner is
    /// refused from then on.
    async fn expiry_and_fencing(&self) {
        let check = "expiry";
        let key = self.key(check);
        let old = self.acquire(check, &key, A).await;
        self.checkpoint(check, &key, A, "300").await;
        let written = self
            .read_expecting(check, &key, Some(A), Some("300"), old.counter)
            .await;

        // Past the expiry, but by less than the skew tolerance: still A's.
        tokio::time::sleep(self.lease + SKEW_TOLERANCE / 2).await;
        self.expect_held(check, &key, B, A).await;

        // Past the expiry by more than the skew tolerance: free.
        tokio::time::sleep(SKEW_TOLERANCE / 2 + MARGIN).await;
        let taken = self.acquire(check, &key, B).await;
        expect(
            check,
            taken.checkpoint.as_deref() == Some("300") && taken.counter > written.counter,
            &format!(
                "{B} took the expired {key}: got {taken:?}, expected checkpoint \"300\" and a \
                 counter above {}",
                written.counter
            ),
        );

        let check = "fencing";
        let what = format!("{A} renewing {key} after {B} took it");
        self.expect_lost(
            check,
            &what,
            &key,
            A,
            self.store.renew(&key, A, self.lease).await,
        )
        .await;
        let what = format!("{A} checkpointing {key} after {B} took it");
        self.expect_lost(
            check,
            &what,
            &key,
            A,
            self.store.checkpoint(&key, A, "400").await,
        )
        .await;
        let what = format!("{A} releasing {key} after {B} took it");
        self.expect_lost(check, &what, &key, A, self.store.release(&key, A).await)
            .await;
        self.expect_held(check, &key, A, B).await;
        let row = self.read(check, &key).await;
        expect(
            check,
            row == taken,
            &format!(
                "{A}'s refused writes changed {key}: it reads {row:?}, was {taken:?} when {B} \
                 took it"
            ),
        );
        self.checkpoint(check, &key, B, "500").await;
        self.read_expecting(check, &key, Some(B), Some("500"), taken.counter)
            .await;
    }

    /// `release`: the owner goes, the checkpoint stays, and another owner takes it at once.
    async fn released_rows(&self) {
        let check = "release";
        let key = self.key(check);
        self.acquire(check, &key, A).await;
        self.checkpoint(check, &key, A, "700").await;
        let held = self.read(check, &key).await;
        self.release(check, &key, A).await;
        let released = self
            .read_expecting(check, &key, None, Some("700"), held.counter)
            .await;
        let what = format!("{A} checkpointing {key} after releasing it");
        self.expect_lost(
            check,
            &what,
            &key,
            A,
            self.store.checkpoint(&key, A, "800").await,
        )
        .await;
        let what = format!("{A} renewing {key} after releasing it");
        self.expect_lost(
            check,
            &what,
            &key,
            A,
            self.store.renew(&key, A, self.lease).await,
        )
        .await;
        let what = format!("{A} releasing {key} twice");
        self.expect_lost(check, &what, &key, A, self.store.release(&key, A).await)
            .await;
        // No waiting for the expiry: a released row is free.
        let taken = self.acquire(check, &key, B).await;
        expect(
            check,
            taken.checkpoint.as_deref() == Some("700") && taken.counter > released.counter,
            &format!(
                "{B} took the released {key}: got {taken:?}, expected checkpoint \"700\" and a \
                 counter above {}",
                released.counter
            ),
        );
    }

    /// `shard-end`: the end-of-shard checkpoint reads back as finished, also after a release.
    async fn shard_end(&self) {
        let check = "shard-end";
        let key = self.key(check);
        let taken = self.acquire(check, &key, A).await;
        self.checkpoint(check, &key, A, SHARD_END).await;
        let row = self
            .read_expecting(check, &key, Some(A), Some(SHARD_END), taken.counter)
            .await;
        expect(
            check,
            row.is_finished(),
            &format!("{key} checkpointed at SHARD_END is not finished: {row:?}"),
        );
        self.release(check, &key, A).await;
        let row = self
            .read_expecting(check, &key, None, Some(SHARD_END), row.counter)
            .await;
        expect(
            check,
            row.is_finished(),
            &format!("{key} at SHARD_END is not finished after its release: {row:?}"),
        );
    }

    /// `checkpoint-renewing`: a checkpoint with renewal writes the checkpoint, pushes the expiry
    /// out by the lease, and is fenced like a checkpoint.
    async fn checkpoint_renewing(&self) {
        let check = "checkpoint-renewing";
        let key = self.key(check);
        let taken = self.acquire(check, &key, A).await;
        let long = self.lease * 20;
        let written = self.store.checkpoint_and_renew(&key, A, "900", long).await;
        expect(
            check,
            written.is_ok(),
            &format!("{A} checkpointing {key} with a renewal failed: {written:?}"),
        );
        let row = self
            .read_expecting(check, &key, Some(A), Some("900"), taken.counter)
            .await;
        let floor = taken.expiry_ms + (long - self.lease).as_millis() as u64 / 2;
        expect(
            check,
            row.expiry_ms >= floor,
            &format!("{key}: the renewal did not push the expiry out ({row:?}, taken {taken:?})"),
        );
        let what = format!("{B} checkpointing {key} with a renewal, held by {A}");
        self.expect_lost(
            check,
            &what,
            &key,
            B,
            self.store.checkpoint_and_renew(&key, B, "901", long).await,
        )
        .await;
        self.checkpoint_lag(&key, long).await;
        self.release(check, &key, A).await;
    }

    /// `checkpoint-lag` (for a store that keeps it): how far behind the reader was is written
    /// with the checkpoint and read back with it; a checkpoint without the figure, and a final
    /// checkpoint, remove it. A store that drops it still writes the checkpoint.
    async fn checkpoint_lag(&self, key: &LeaseKey, long: Duration) {
        let check = "checkpoint-lag";
        let what = format!("{A} checkpointing {key} 1500 ms behind");
        let written = ok(
            check,
            &what,
            self.store
                .checkpoint_and_renew_behind(key, A, "910", Some(1_500), long)
                .await,
        );
        let row =
            ok(check, &format!("reading {key}"), self.store.read(key).await).unwrap_or_default();
        expect(
            check,
            written.checkpoint.as_deref() == Some("910")
                && row.checkpoint.as_deref() == Some("910"),
            &format!("{what} answered {written:?}, and the row reads {row:?}"),
        );
        if written.behind_ms.is_none() && row.behind_ms.is_none() {
            // The store does not keep the figure (the provided call drops it).
            return;
        }
        expect(
            check,
            written.behind_ms == Some(1_500) && row.behind_ms == Some(1_500),
            &format!("{what} answered {written:?}, and the row reads {row:?}"),
        );
        let what = format!("{A} checkpointing {key} with no figure");
        ok(
            check,
            &what,
            self.store.checkpoint_and_renew(key, A, "911", long).await,
        );
        let row =
            ok(check, &format!("reading {key}"), self.store.read(key).await).unwrap_or_default();
        expect(
            check,
            row.behind_ms.is_none() && row.checkpoint.as_deref() == Some("911"),
            &format!("after {what}, a figure of an earlier checkpoint is left: {row:?}"),
        );
        ok(
            check,
            "checkpointing 20 ms behind",
            self.store
                .checkpoint_and_renew_behind(key, A, "912", Some(20), long)
                .await,
        );
        self.checkpoint(check, key, A, "913").await;
        let row =
            ok(check, &format!("reading {key}"), self.store.read(key).await).unwrap_or_default();
        expect(
            check,
            row.behind_ms.is_none(),
            &format!(
                "after a final checkpoint of {key}, the figure of an earlier one is left: {row:?}"
            ),
        );
        let what = format!("{B} checkpointing {key} with a figure, held by {A}");
        self.expect_lost(
            check,
            &what,
            key,
            B,
            self.store
                .checkpoint_and_renew_behind(key, B, "914", Some(1), long)
                .await,
        )
        .await;
    }

    /// `take-from-start`: the start of a take lands only in a row without a checkpoint, and a
    /// refused take writes nothing.
    async fn take_from_start(&self) {
        let check = "take-from-start";
        let key = self.key(check);
        let what = format!("{A} taking new {key} from TRIM_HORIZON");
        let taken = ok(
            check,
            &what,
            self.store
                .acquire_from(&key, A, self.lease, "TRIM_HORIZON")
                .await,
        );
        expect(
            check,
            taken.checkpoint.as_deref() == Some("TRIM_HORIZON") && taken.is_held_by(A),
            &format!("{what} answered {taken:?}"),
        );
        // The row was new: its counter was 0 before the take.
        self.read_expecting(check, &key, Some(A), Some("TRIM_HORIZON"), 0)
            .await;
        let refused = self.store.acquire_from(&key, B, self.lease, "LATEST").await;
        expect(
            check,
            matches!(refused, Err(LeaseError::Held { .. })),
            &format!("{B} taking {key} from {A} answered {refused:?}"),
        );
        self.checkpoint(check, &key, A, "42").await;
        self.release(check, &key, A).await;
        let what = format!("{B} taking released {key}, checkpointed at 42");
        let again = ok(
            check,
            &what,
            self.store.acquire_from(&key, B, self.lease, "LATEST").await,
        );
        expect(
            check,
            again.checkpoint.as_deref() == Some("42"),
            &format!("{what} answered {again:?}"),
        );
        self.checkpoint(check, &key, B, SHARD_END).await;
        self.release(check, &key, B).await;
        let what = format!("{A} taking finished {key}");
        let finished = ok(
            check,
            &what,
            self.store.acquire_from(&key, A, self.lease, "LATEST").await,
        );
        expect(
            check,
            finished.is_finished(),
            &format!("{what} answered {finished:?}"),
        );
        self.release(check, &key, A).await;
    }

    /// `listing`: a store that lists a stream's rows lists exactly those.
    async fn listing(&self) {
        let check = "listing";
        let stream = format!("{}-listing", self.prefix);
        let mine = LeaseKey::new(stream.as_str(), SHARD);
        let other = LeaseKey::new(format!("{stream}-other"), SHARD);
        self.acquire(check, &mine, A).await;
        self.acquire(check, &other, B).await;
        match self.store.list(&stream).await {
            Ok(None) => {}
            Ok(Some(rows)) => {
                let keys: Vec<&LeaseKey> = rows.iter().map(|(key, _)| key).collect();
                expect(
                    check,
                    keys == [&mine],
                    &format!("listing {stream:?} answered {keys:?}, not just {mine}"),
                );
                expect(
                    check,
                    rows[0].1.is_held_by(A),
                    &format!("listing {stream:?} shows {mine} as {:?}", rows[0].1),
                );
            }
            Err(err) => expect(check, false, &format!("listing {stream:?} failed: {err}")),
        }
        self.release(check, &mine, A).await;
        self.release(check, &other, B).await;
    }

    /// `deletion`: a row goes only as read, and only without an unexpired lease.
    async fn deletion(&self) {
        let check = "deletion";
        let key = self.key(check);
        let taken = self.acquire(check, &key, A).await;
        self.checkpoint(check, &key, A, SHARD_END).await;
        let held = self.read(check, &key).await;
        let refused = ok(
            check,
            "deleting a held row",
            self.store.delete(&key, held.counter).await,
        );
        expect(check, !refused, "a row with an unexpired lease was deleted");
        self.release(check, &key, A).await;
        let released = self.read(check, &key).await;
        let stale = ok(
            check,
            "deleting with an old counter",
            self.store.delete(&key, taken.counter).await,
        );
        expect(
            check,
            !stale,
            "a row was deleted with a counter it no longer holds",
        );
        let deleted = ok(
            check,
            "deleting the released row",
            self.store.delete(&key, released.counter).await,
        );
        if !deleted {
            // A store that does not delete: its rows stay.
            return;
        }
        let gone = ok(
            check,
            "reading the deleted row",
            self.store.read(&key).await,
        );
        expect(
            check,
            gone.is_none(),
            &format!("a deleted row reads {gone:?}"),
        );
        let again = ok(
            check,
            "deleting it again",
            self.store.delete(&key, released.counter).await,
        );
        expect(check, !again, "a missing row was deleted");
        let fresh = self.acquire(check, &key, B).await;
        expect(
            check,
            fresh.checkpoint.is_none(),
            &format!(
                "the row taken after its deletion holds {:?}",
                fresh.checkpoint
            ),
        );
        self.release(check, &key, B).await;
    }

    /// `take-over`: taking a row from a holder whose beat lapsed, on the row as read.
    async fn take_over(&self) {
        let check = "take-over";
        // A lease no run of the suite outlives: only the take-over's own condition lets a
        // take through.
        const LONG: Duration = Duration::from_secs(600);
        let key = self.key(check);
        let held = ok(
            check,
            &format!("{A} acquires {key}"),
            self.store.acquire_from(&key, A, LONG, "TRIM_HORIZON").await,
        );
        let over = |taker: &'static str, holder: &'static str, counter: u64| {
            self.store
                .take_over(&key, taker, self.lease, "LATEST", holder, counter)
        };
        match over(B, A, held.counter.wrapping_sub(1)).await {
            Err(LeaseError::Store {
                operation: "take_over",
                ..
            }) => {
                // A store without take-overs: nothing to check (liveness by beat needs them).
                self.release(check, &key, A).await;
                return;
            }
            Err(LeaseError::Held { .. }) => {}
            other => fail(
                check,
                &format!(
                    "a take-over of {key} at a counter it no longer holds answered {other:?}; \
                     it must be refused (Held)"
                ),
            ),
        }
        let other_holder = over(B, "suite-owner-c", held.counter).await;
        expect(
            check,
            matches!(other_holder, Err(LeaseError::Held { .. })),
            &format!(
                "a take-over of {key} naming a holder it does not have answered {other_holder:?}"
            ),
        );
        let taken = ok(
            check,
            &format!("{B} takes {key} over from {A}"),
            over(B, A, held.counter).await,
        );
        expect(
            check,
            taken.is_held_by(B)
                && taken.counter > held.counter
                && taken.checkpoint.as_deref() == Some("TRIM_HORIZON"),
            &format!(
                "{B}'s take-over of {key} (was {held:?}) answered {taken:?}: it must name {B}, \
                 bump the counter and keep the checkpoint"
            ),
        );
        let second = over("suite-owner-c", A, held.counter).await;
        expect(
            check,
            matches!(second, Err(LeaseError::Held { .. })),
            &format!(
                "a second take-over of {key} decided on the same row answered {second:?}: two \
                 instances would read the shard"
            ),
        );
        self.read_expecting(check, &key, Some(B), Some("TRIM_HORIZON"), held.counter)
            .await;
        // Several take-overs of one row at once: exactly one lands.
        let racing = self.key(&format!("{check}-racing"));
        let row = ok(
            check,
            &format!("{A} acquires {racing}"),
            self.store.acquire(&racing, A, LONG).await,
        );
        let takers = [B, "suite-owner-c", "suite-owner-d"];
        let answers = futures::future::join_all(takers.iter().map(|taker| {
            self.store
                .take_over(&racing, taker, self.lease, "LATEST", A, row.counter)
        }))
        .await;
        let winners: Vec<_> = takers
            .iter()
            .zip(&answers)
            .filter(|(_, answer)| answer.is_ok())
            .map(|(taker, _)| *taker)
            .collect();
        expect(
            check,
            winners.len() == 1,
            &format!(
                "of {} simultaneous take-overs of {racing}, {winners:?} landed",
                takers.len()
            ),
        );
        let missing = self.key(&format!("{check}-missing"));
        let nothing = self
            .store
            .take_over(&missing, B, self.lease, "LATEST", A, 1)
            .await;
        expect(
            check,
            nothing.is_err(),
            &format!("a take-over of the missing row {missing} answered {nothing:?}"),
        );
        self.release(check, &key, B).await;
        if let [winner] = winners.as_slice() {
            self.release(check, &racing, winner).await;
        }
    }

    /// `notices`: the stream's notice, as a store that keeps one keeps it.
    async fn notices(&self) {
        let check = "notices";
        let stream = format!("{}-notices", self.prefix);
        let stream = stream.as_str();
        let read =
            |what: &'static str| async move { ok(check, what, self.store.notice(stream).await) };
        let Some(fresh) = read("reading a new stream's notice").await else {
            // A store without notices: the handover poll reads the rows instead.
            return;
        };
        expect(
            check,
            fresh == Notice::default(),
            &format!("a new stream's notice reads {fresh:?}, not an empty one"),
        );
        let key = LeaseKey::new(stream, SHARD);
        self.acquire(check, &key, A).await;
        self.release(check, &key, A).await;
        let released = read("reading the notice after a release")
            .await
            .unwrap_or_default();
        expect(
            check,
            released.counter == fresh.counter + 1,
            &format!(
                "a release left the notice's counter at {}, not one up",
                released.counter
            ),
        );
        let refused = self.store.release(&key, B).await;
        expect(
            check,
            refused.is_err(),
            "a release by a non-owner was accepted",
        );
        let after = read("reading the notice after a refused release")
            .await
            .unwrap_or_default();
        expect(
            check,
            after.counter == released.counter,
            "a refused release bumped the notice's counter",
        );
        self.notice_beats(check, stream, after.counter).await;
        if self.store.keeps_leases_by_beat() {
            self.leave_beat(check, stream).await;
        }
        if let Some(rows) = ok(check, "listing the stream", self.store.list(stream).await) {
            let keys: Vec<&LeaseKey> = rows.iter().map(|(key, _)| key).collect();
            expect(
                check,
                keys == [&key],
                &format!("listing {stream:?} beside its notice answered {keys:?}, not just {key}"),
            );
        }
    }

    /// `notices`, continued, for a store that keeps leases by beat: a leave by beat removes no
    /// later beat under the same owner (a removal landing late, after a later subscription of
    /// the same run beat), and removes its own with a bump.
    async fn leave_beat(&self, check: &'static str, stream: &str) {
        let read =
            |what: &'static str| async move { ok(check, what, self.store.notice(stream).await) };
        let until = epoch_millis() + self.lease_ms();
        ok(
            check,
            "A beats",
            self.store.beat(stream, A, until + 1_000, &[]).await,
        );
        let before = read("reading the notice").await.unwrap_or_default();
        ok(
            check,
            "A leaves with an earlier beat's end",
            self.store.leave_beat(stream, A, until).await,
        );
        let kept = read("reading the notice").await.unwrap_or_default();
        expect(
            check,
            kept.beats.get(A) == Some(&(until + 1_000)) && kept.counter == before.counter,
            &format!("a leave by an earlier beat's end removed a later beat: {kept:?}"),
        );
        ok(
            check,
            "A leaves with its last beat's end",
            self.store.leave_beat(stream, A, until + 1_000).await,
        );
        let left = read("reading the notice").await.unwrap_or_default();
        expect(
            check,
            !left.beats.contains_key(A) && left.counter == before.counter + 1,
            &format!("a leave by the last beat's end left {left:?}"),
        );
    }

    /// `notices`, continued: beats are recorded without a bump, a beat removes the ones it
    /// names, and a leave removes its own beat with a bump (`counter`: the notice's before).
    async fn notice_beats(&self, check: &'static str, stream: &str, counter: u64) {
        let read =
            |what: &'static str| async move { ok(check, what, self.store.notice(stream).await) };
        let until = epoch_millis() + self.lease_ms();
        ok(
            check,
            "a beat of A",
            self.store.beat(stream, A, until, &[]).await,
        );
        let beaten = read("reading the notice after a beat")
            .await
            .unwrap_or_default();
        expect(
            check,
            beaten.beats.get(A) == Some(&until) && beaten.counter == counter,
            &format!("after A's beat until {until} the notice reads {beaten:?}"),
        );
        // A beat that names a live beat as gone removes nothing: its owner counts on it.
        let forget = [A.to_owned()];
        ok(
            check,
            "a beat of B naming A's live beat as gone",
            self.store.beat(stream, B, until + 1, &forget).await,
        );
        let kept = read("reading the notice after B's beat")
            .await
            .unwrap_or_default();
        expect(
            check,
            kept.beats.get(A) == Some(&until) && kept.beats.get(B) == Some(&(until + 1)),
            &format!(
                "B's beat, naming A's live beat (until {until}) as gone, left {:?}: a live beat \
                 is never removed",
                kept.beats
            ),
        );
        // A beat lapsed long ago is removed.
        let gone = "suite-owner-gone";
        let long_ago = epoch_millis().saturating_sub(600_000);
        ok(
            check,
            "a beat lapsed long ago",
            self.store.beat(stream, gone, long_ago, &[]).await,
        );
        ok(
            check,
            "a beat of B naming the lapsed beat as gone",
            self.store
                .beat(stream, B, until + 1, &[gone.to_owned()])
                .await,
        );
        let forgot = read("reading the notice after B's beat")
            .await
            .unwrap_or_default();
        expect(
            check,
            !forgot.beats.contains_key(gone) && forgot.beats.get(B) == Some(&(until + 1)),
            &format!(
                "B's beat, removing a beat lapsed long ago, left {:?}",
                forgot.beats
            ),
        );
        // A beat of B sent before the one that stands, landing late: it moves nothing back.
        ok(
            check,
            "an older beat of B, landing late",
            self.store.beat(stream, B, until - 1, &[]).await,
        );
        let late = read("reading the notice after B's late beat")
            .await
            .unwrap_or_default();
        expect(
            check,
            late.beats.get(B) == Some(&(until + 1)),
            &format!(
                "B's beat until {} moved back by an older one to {:?}: an instance kept alive \
                 by its beat would count on more than the notice shows",
                until + 1,
                late.beats.get(B)
            ),
        );
        ok(check, "B leaves", self.store.leave(stream, B).await);
        let left = read("reading the notice after B left")
            .await
            .unwrap_or_default();
        expect(
            check,
            !left.beats.contains_key(B) && left.counter == forgot.counter + 1,
            &format!("after B left the notice reads {left:?}: its beat stays or no bump"),
        );
        // The head alone (the whole notice, for a store that keeps none apart) reads the same
        // counter and marks, and tells of another layout as the whole notice does (a whole
        // read counts a written layout 2 only while a beat of it runs; a head read alone cannot
        // tell, and B's beat may have lapsed by now).
        let mine = if self.store.keeps_notice_head_apart() {
            crate::NOTICE_LAYOUT_APART
        } else {
            crate::NOTICE_LAYOUT
        };
        let head = ok(
            check,
            "reading the notice's head",
            self.store.notice_head(stream).await,
        )
        .unwrap_or_default();
        expect(
            check,
            head.counter == left.counter
                && head.asks == left.asks
                && head.other_layout_than(mine) == left.other_layout_than(mine),
            &format!("the notice's head reads {head:?}, where the whole notice reads {left:?}"),
        );
        expect(
            check,
            !self.store.keeps_notice_head_apart()
                || head.beats.is_empty() && head.incarnations.is_empty(),
            &format!("the head of a notice kept apart reads beats or records: {head:?}"),
        );
    }

    /// `handoff`: a handoff, asked, then written.
    async fn handoff(&self) {
        let check = "handoff";
        let key = self.key(check);
        let asked_ms = epoch_millis();
        let unheld = ok(
            check,
            "asking for a row nobody holds",
            self.store.ask_handoff(&key, A, 0, B, asked_ms).await,
        );
        expect(
            check,
            !unheld,
            "a request was recorded on a row that does not exist",
        );
        let taken = self.acquire(check, &key, A).await;
        let stale = ok(
            check,
            "asking on a counter the row has left",
            self.store
                .ask_handoff(&key, A, taken.counter - 1, B, asked_ms)
                .await,
        );
        expect(
            check,
            !stale,
            "a request on an older counter of the row was recorded",
        );
        let asked = ok(
            check,
            "B asks A for the row",
            self.store
                .ask_handoff(&key, A, taken.counter, B, asked_ms)
                .await,
        );
        if !asked {
            // A store without handoffs: balancing waits for free shards instead.
            return;
        }
        let wrong_holder = ok(
            check,
            "asking a non-holder",
            self.store
                .ask_handoff(&key, B, taken.counter, "suite-owner-c", asked_ms)
                .await,
        );
        expect(
            check,
            !wrong_holder,
            "a request naming a non-holder was recorded",
        );
        let other = ok(
            check,
            "another instance asks while B's request stands",
            self.store
                .ask_handoff(&key, A, taken.counter, "suite-owner-c", asked_ms)
                .await,
        );
        expect(
            check,
            !other,
            "a standing request was replaced by another asker's",
        );
        if self.store.keeps_leases_by_beat() {
            self.marks(check, key.stream()).await;
        }
        let counter = self
            .handoff_seen_by_holder(check, &key, taken.counter)
            .await;
        self.handoff_written(check, &key, counter).await;
    }

    /// `handoff`, continued, for a store that keeps leases by beat: a holder kept alive by its
    /// beat writes nothing while idle, and hears of a request from its mark in the notice, which
    /// each `mark_asked` moves on.
    async fn marks(&self, check: &'static str, stream: &str) {
        let marks = |notice: Option<Notice>| notice.and_then(|notice| notice.asks.get(A).copied());
        let before = marks(ok(
            check,
            "reading the notice",
            self.store.notice(stream).await,
        ));
        for _ in 0..2 {
            ok(
                check,
                "marking the requests of A",
                self.store.mark_asked(stream, &[A.to_owned()]).await,
            );
        }
        let after = marks(ok(
            check,
            "reading the notice",
            self.store.notice(stream).await,
        ));
        expect(
            check,
            after == Some(before.unwrap_or(0) + 2),
            &format!(
                "two marks of the requests of A moved its count in the notice (Notice::asks) \
                 from {before:?} to {after:?}, not by two"
            ),
        );
    }

    /// `handoff`, continued: the request stands on the row, and the holder's renewal and
    /// checkpoint answer it; returns the row's counter after them.
    async fn handoff_seen_by_holder(
        &self,
        check: &'static str,
        key: &LeaseKey,
        counter: u64,
    ) -> u64 {
        let row = self.read(check, key).await;
        expect(
            check,
            row.counter == counter && row.handoff.as_ref().is_some_and(|asked| asked.to == B),
            &format!("after B's request the row reads {row:?}: no request, or the counter moved"),
        );
        let renewed = self.renew(check, key, A).await;
        expect(
            check,
            renewed.handoff.as_ref().is_some_and(|asked| asked.to == B),
            &format!("the holder's renewal answered {renewed:?}, without B's request"),
        );
        let checkpointed = ok(
            check,
            "A checkpoints and renews",
            self.store
                .checkpoint_and_renew(key, A, "7", self.lease)
                .await,
        );
        expect(
            check,
            checkpointed
                .handoff
                .as_ref()
                .is_some_and(|asked| asked.to == B)
                && checkpointed.checkpoint.as_deref() == Some("7"),
            &format!("a checkpoint with renewal answered {checkpointed:?}"),
        );
        checkpointed.counter
    }

    /// `handoff`, continued: only the holder hands over, only to the asker, and the asker takes
    /// the row with the final checkpoint.
    async fn handoff_written(&self, check: &'static str, key: &LeaseKey, counter: u64) {
        let to_other = self
            .store
            .hand_over(key, A, "suite-owner-c", Some("8"), self.lease)
            .await;
        expect(
            check,
            to_other.as_ref().is_err_and(LeaseError::is_fenced),
            &format!("a handoff to an instance that did not ask answered {to_other:?}"),
        );
        let by_other = self.store.hand_over(key, B, B, Some("8"), self.lease).await;
        expect(
            check,
            by_other.as_ref().is_err_and(LeaseError::is_fenced),
            &format!("a handoff by a non-holder answered {by_other:?}"),
        );
        let before = epoch_millis();
        ok(
            check,
            "A hands the row to B",
            self.store.hand_over(key, A, B, Some("9"), self.lease).await,
        );
        let handed = self
            .read_expecting(check, key, Some(B), Some("9"), counter)
            .await;
        expect(
            check,
            handed.handoff.is_none()
                && handed.expiry_ms + 50 + millis(SKEW_TOLERANCE) >= before + self.lease_ms(),
            &format!("the handed row reads {handed:?}: the request stays, or no lease for B"),
        );
        let after_a = self.store.renew(key, A, self.lease).await;
        expect(
            check,
            after_a.as_ref().is_err_and(LeaseError::is_fenced),
            "the old holder renewed a row it handed over",
        );
        let took = self.acquire(check, key, B).await;
        expect(
            check,
            took.checkpoint.as_deref() == Some("9"),
            &format!("B's take of the handed row answered {took:?}, not the final checkpoint"),
        );
        ok(
            check,
            "A asks B back",
            self.store
                .ask_handoff(key, B, took.counter, A, epoch_millis())
                .await,
        );
        let retaken = self.acquire(check, key, B).await;
        expect(
            check,
            retaken.handoff.is_none(),
            &format!("a take left the request in the row: {retaken:?}"),
        );
    }

    /// `streams`: one shard id in two streams is two rows.
    async fn streams(&self) {
        let check = "streams";
        let first = LeaseKey::new(format!("{}-streams-one", self.prefix), SHARD);
        let second = LeaseKey::new(format!("{}-streams-two", self.prefix), SHARD);
        let one = self.acquire(check, &first, A).await;
        // B takes the same shard id of the other stream: a row of its own, not held by A.
        let two = self.acquire(check, &second, B).await;
        self.checkpoint(check, &first, A, "10").await;
        self.checkpoint(check, &second, B, "20").await;
        let what = format!("{A} checkpointing {second}, held by {B}");
        self.expect_lost(
            check,
            &what,
            &second,
            A,
            self.store.checkpoint(&second, A, "30").await,
        )
        .await;
        self.expect_held(check, &first, B, A).await;
        self.read_expecting(check, &first, Some(A), Some("10"), one.counter)
            .await;
        self.read_expecting(check, &second, Some(B), Some("20"), two.counter)
            .await;
        self.release(check, &first, A).await;
        self.read_expecting(check, &second, Some(B), Some("20"), two.counter)
            .await;
    }
}

/// Panics with the suite's message for `check`.
#[track_caller]
fn fail(check: &str, message: &str) -> ! {
    panic!("lease store suite, check `{check}`: {message}")
}

/// Panics unless `condition` holds.
#[track_caller]
fn expect(check: &str, condition: bool, message: &str) {
    if !condition {
        fail(check, message);
    }
}

/// The value of a call that must succeed.
#[track_caller]
fn ok<T>(check: &str, what: &str, result: Result<T, LeaseError>) -> T {
    result.unwrap_or_else(|error| fail(check, &format!("{what} failed: {error}")))
}
