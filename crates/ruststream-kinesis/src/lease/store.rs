//! The lease store contract: five calls every store implements, and the others with default
//! bodies (the start's checks, the stream's notice, handoffs, the deletion of a row).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{LeaseError, LeaseKey, LeaseState, Notice};

/// The future every [`LeaseStore`] call returns: boxed, so the trait stays object safe and a
/// broker holds its store as `Arc<dyn LeaseStore>`.
pub type LeaseFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LeaseError>> + Send + 'a>>;

/// Holds each shard's owner and checkpoint: five calls that acquire, renew, checkpoint, read and
/// release a lease, each naming the shard by its [`LeaseKey`].
///
/// Every write is conditional. [`acquire`](Self::acquire) succeeds when the row has no owner, has
/// this owner, or has expired (by more than [`SKEW_TOLERANCE`](super::SKEW_TOLERANCE)); [`renew`](Self::renew),
/// [`checkpoint`](Self::checkpoint) and [`release`](Self::release) succeed only while `owner` holds
/// the row, and answer [`LeaseError::Lost`] otherwise. Every write bumps the row's counter.
/// [`read`](Self::read) is strongly consistent. One store serves every stream of a broker.
///
/// Implementations: [`MemoryLeaseStore`](crate::MemoryLeaseStore) (the default, one process) and
/// `DynamoLeaseStore` (feature `dynamodb-lease`). A store on another database implements these
/// five calls, may override any of the calls with a default body (from [`check`](Self::check)
/// to [`hand_over`](Self::hand_over) below; each says what its default gives up), and runs
/// `lease::suite` (feature `store-suite`) against itself.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ruststream_kinesis::{LeaseKey, LeaseStore, MemoryLeaseStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ruststream_kinesis::LeaseError> {
/// let store = MemoryLeaseStore::new();
/// let key = LeaseKey::new("orders", "shardId-000000000000");
/// store.acquire(&key, "pod-a", Duration::from_secs(10)).await?;
/// store.checkpoint(&key, "pod-a", "49590338271490256608559692538361571095921575989136588898").await?;
/// // Another owner cannot take a live lease.
/// assert!(store.acquire(&key, "pod-b", Duration::from_secs(10)).await.is_err());
/// store.release(&key, "pod-a").await?;
/// let row = store.read(&key).await?.expect("the row exists");
/// assert_eq!(row.owner, None);
/// assert!(row.checkpoint.is_some());
/// # Ok(())
/// # }
/// ```
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// Takes the lease of `key` for `owner` for `lease`, creating the row when there is none.
    /// Returns the row as written, its checkpoint included, which is where the new owner resumes.
    ///
    /// A store may refuse to create a row it has seen exist and that was deleted since (a finished
    /// shard's row, which a round deleted): `DynamoLeaseStore` does, with
    /// [`LeaseError::Deleted`], so a take decided on a stale view cannot bring it back.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] when another owner holds an unexpired lease; [`LeaseError::Deleted`]
    /// as above; a store failure otherwise.
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState>;

    /// Extends `owner`'s lease of `key` by `lease` from now.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when `owner` no longer holds the row; a store failure otherwise.
    fn renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState>;

    /// Records `checkpoint` (a sequence number, `<sequence number>:<index>` inside a KPL
    /// aggregate, [`SHARD_END`](crate::SHARD_END) or another value of
    /// [`LeaseState::checkpoint`](crate::LeaseState::checkpoint), kept as the string it is) for `key`,
    /// accepted only while `owner` holds the lease.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when `owner` no longer holds the row; a store failure otherwise.
    fn checkpoint<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
    ) -> LeaseFuture<'a, ()>;

    /// Reads the row of `key`, strongly consistent; `None` when there is none.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn read<'a>(&'a self, key: &'a LeaseKey) -> LeaseFuture<'a, Option<LeaseState>>;

    /// Gives up `owner`'s lease of `key`, keeping the checkpoint, so another instance can take
    /// the shard at once.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when `owner` no longer holds the row; a store failure otherwise.
    fn release<'a>(&'a self, key: &'a LeaseKey, owner: &'a str) -> LeaseFuture<'a, ()>;

    /// Checks, before anything is read, that the store can serve as a lease table at all:
    /// `connect` calls it, and an error stops the start
    /// ([`KinesisError::LeaseStore`](crate::KinesisError::LeaseStore)). Answer an error only
    /// for what no retry cures (`DynamoLeaseStore`: a table that does not exist, one keyed
    /// otherwise than by `lease_key`); a store that cannot tell now (its database did not
    /// answer, or refused the read) answers `Ok` and lets the calls that follow report it.
    /// Provided as `Ok`, for a store with nothing to check.
    ///
    /// # Errors
    ///
    /// [`LeaseError::TableMissing`], [`LeaseError::TableMismatch`], or another error naming
    /// what is wrong and its fix.
    fn check(&self) -> LeaseFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Claims `stream` for this store's application before a subscription takes any of its
    /// shards: two applications pointed at one table by mistake that start together then cannot
    /// each take part of the stream for good; the one refused takes nothing, and its subscription
    /// fails naming both. Provided as `Ok`, for a store that names no application.
    ///
    /// # Errors
    ///
    /// [`LeaseError::OtherApplication`] when the stream (or one of its rows) is another
    /// application's; a store failure otherwise.
    fn claim<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        let _ = stream;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Records `checkpoint` and extends `owner`'s lease by `lease` from now, so a shard whose
    /// checkpoint moves needs no separate renewal. Answers the row as written, as
    /// [`renew`](Self::renew) does: a holder learns of a handoff asked of it
    /// ([`LeaseState::handoff`]) from either answer.
    ///
    /// Provided as a checkpoint followed by a renewal; a store that can do both in one
    /// conditional write overrides it (both stores of this crate do).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when `owner` no longer holds the row; a store failure otherwise.
    fn checkpoint_and_renew<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(async move {
            self.checkpoint(key, owner, checkpoint).await?;
            self.renew(key, owner, lease).await
        })
    }

    /// [`checkpoint_and_renew`](Self::checkpoint_and_renew), recording with the checkpoint how
    /// far behind its shard's newest record the reader was (`behind_ms`, from the last
    /// `GetRecords` answer), for people reading the table ([`LeaseState::behind_ms`]); `None`
    /// removes a figure an earlier checkpoint left. Nothing decides on it. Readers write every
    /// checkpoint through this call.
    ///
    /// Provided as [`checkpoint_and_renew`](Self::checkpoint_and_renew), which drops the
    /// figure: a store that keeps it overrides this (both stores of this crate do, in the same
    /// write as the checkpoint).
    ///
    /// # Errors
    ///
    /// As [`checkpoint_and_renew`](Self::checkpoint_and_renew).
    fn checkpoint_and_renew_behind<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        checkpoint: &'a str,
        behind_ms: Option<u64>,
        lease: Duration,
    ) -> LeaseFuture<'a, LeaseState> {
        let _ = behind_ms;
        self.checkpoint_and_renew(key, owner, checkpoint, lease)
    }

    /// Takes the lease like [`acquire`](LeaseStore::acquire) and, when the row holds no
    /// checkpoint yet, records `start` as its checkpoint; answers the row as taken, checkpoint
    /// included. The coordinator takes every shard this way, so a first owner that dies before
    /// its first acknowledgement leaves its start behind, and the next owner starts no later.
    ///
    /// Provided as an acquire followed by a checkpoint when the row had none; a store that can
    /// do both in one conditional write overrides it (both stores of this crate do), so no crash
    /// falls between the take and the recorded start.
    ///
    /// # Errors
    ///
    /// As [`acquire`](LeaseStore::acquire); [`LeaseError::Lost`] when the lease was lost
    /// between the two calls of the provided version.
    fn acquire_from<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
    ) -> LeaseFuture<'a, LeaseState> {
        Box::pin(async move {
            let mut state = self.acquire(key, owner, lease).await?;
            if state.checkpoint.is_none() {
                self.checkpoint(key, owner, start).await?;
                state.checkpoint = Some(start.to_owned());
            }
            Ok(state)
        })
    }

    /// Takes `key`'s shard from `holder`, whose leases its beat keeps alive (the row's expiry
    /// lies past any lease) and whose beat the caller judged lapsed: one conditional write,
    /// accepted where [`acquire_from`](Self::acquire_from) is, and also while the row still
    /// names `holder` at `counter` (the row the caller decided on), whatever its expiry. Writes
    /// what `acquire_from` writes and answers the row as taken. Two instances that both judged
    /// `holder` gone cannot both win: the first take bumps the counter the second is
    /// conditioned on.
    ///
    /// Provided as an error naming the fix, for a store that cannot condition a take on the
    /// counter: liveness by beat needs this call.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] when the row names another owner or counter (a later take, or a
    /// holder that took its row again) and is not free; [`LeaseError::Deleted`] when there is no
    /// row any more; a store failure otherwise.
    fn take_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        lease: Duration,
        start: &'a str,
        holder: &'a str,
        counter: u64,
    ) -> LeaseFuture<'a, LeaseState> {
        let _ = (owner, lease, start, holder, counter);
        Box::pin(std::future::ready(Err(super::LeaseError::Store {
            key: key.clone(),
            operation: "take_over",
            message: "this lease store cannot take a shard over from an instance whose beat \
                      lapsed (LeaseStore::take_over is not implemented); implement it (the store \
                      suite's take-over check says how it must behave), or keep leases alive \
                      per row"
                .to_owned(),
        })))
    }

    /// Every row of `stream` in one call, for a coordinator's listing round and for its watch
    /// on released and expired leases between listings; `None` when the store has no such
    /// call, and the coordinator then reads the rows it needs one by one.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn list<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        let _ = stream;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// [`list`](Self::list), where rows a little behind the latest writes will do: a store may
    /// answer them from an eventually consistent read (DynamoDB's costs half a strongly
    /// consistent one, and usually shows every write older than about a second) where it
    /// answers [`polls_read_behind`](Self::polls_read_behind) `true`. A listing round calls it
    /// only then, and only when it reads the rows for the full-read cadence alone (nothing told
    /// it that a row moved): every write it may lead to is conditioned on the row's counter as
    /// read, so a row read behind its latest write can only leave a take unmade (or a write
    /// refused) until a later read, never make a second holder. Provided as
    /// [`list`](Self::list).
    ///
    /// # Errors
    ///
    /// A store failure.
    fn list_eventually<'a>(
        &'a self,
        stream: &'a str,
    ) -> LeaseFuture<'a, Option<Vec<(LeaseKey, LeaseState)>>> {
        self.list(stream)
    }

    /// Deletes the row of `key` if its counter is still `counter` and no owner holds an
    /// unexpired lease of it (more than [`SKEW_TOLERANCE`](super::SKEW_TOLERANCE) in the past):
    /// a listing round tidies the table this way (a finished shard whose children all moved past
    /// their start; a shard gone from the stream). Answers whether it deleted the row. Provided
    /// as deleting nothing (`false`), for a store that cannot delete: its rows stay.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn delete<'a>(&'a self, key: &'a LeaseKey, counter: u64) -> LeaseFuture<'a, bool> {
        let _ = (key, counter);
        Box::pin(std::future::ready(Ok(false)))
    }

    /// The [`Notice`] of `stream`, strongly consistent (an empty one when nothing was written
    /// yet); `None` when the store keeps no notices, and the handover poll then reads the rows
    /// of the shards it waits for at every poll.
    ///
    /// A store that keeps notices bumps `stream`'s counter with every
    /// [`release`](Self::release) that lands (a bump that fails is not the release's failure),
    /// and keeps the beats [`beat`](Self::beat) writes.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn notice<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        let _ = stream;
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Whether [`notice_eventually`](Self::notice_eventually), [`notice_head`](Self::notice_head)
    /// and [`list_eventually`](Self::list_eventually) may answer a little behind the latest
    /// writes (`DynamoLeaseStore::eventually_consistent_polls`): the coordinator then judges
    /// what they show as such (the check for another run under the owner id waits for a
    /// consistent read, and a counter, or this instance's own count of marks, shown lower than
    /// one read before has the next poll read consistent). Provided as `false`: every read
    /// shows the latest writes, and the coordinator calls only the consistent reads (and
    /// `notice_head`, taken as the latest). A store that wraps another forwards it with the
    /// three reads: one that does not forwards nothing read behind to the coordinator but a
    /// head (if it forwards `notice_head`), which the coordinator then takes as the latest (a
    /// counter read behind is taken for a moved one: the rows are read again), and pays the
    /// full price for the rest.
    fn polls_read_behind(&self) -> bool {
        false
    }

    /// [`notice`](Self::notice), where a notice a little behind the latest writes will do: a
    /// store may answer it from an eventually consistent read. The handover poll reads the
    /// whole notice so (it usually learns of a change a moment later), where the store answers
    /// [`polls_read_behind`](Self::polls_read_behind) `true`; a take-over judges its holder's
    /// beat only on a notice read by [`notice`](Self::notice), and the check for another run
    /// under the owner id judges another run's record so too (on a read behind, only its own
    /// run's). Provided as [`notice`](Self::notice).
    ///
    /// # Errors
    ///
    /// A store failure.
    fn notice_eventually<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        self.notice(stream)
    }

    /// Reads the head of `stream`'s notice alone, where the store keeps it apart from the beats
    /// and the runs' records ([`keeps_notice_head_apart`](Self::keeps_notice_head_apart)): its
    /// counter, its marks ([`Notice::asks`]) and its layout ([`Notice::layout`]); the beats and
    /// records it leaves empty, and the poll takes those of its last whole read. Read at every
    /// handover poll while the beats last read still say who is alive, so it is the poll's
    /// steady cost; so a store that answers [`polls_read_behind`](Self::polls_read_behind)
    /// `true` may answer it from an eventually consistent read, as
    /// [`notice_eventually`](Self::notice_eventually) (one that answers `false` must answer
    /// the latest head). Provided as [`notice`](Self::notice): the whole notice.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn notice_head<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, Option<Notice>> {
        self.notice(stream)
    }

    /// Whether the store keeps each stream's notice head apart from its beats and runs'
    /// records ([`NOTICE_LAYOUT_APART`](crate::NOTICE_LAYOUT_APART)), so that
    /// [`notice_head`](Self::notice_head) reads less than [`notice`](Self::notice) and the
    /// handover poll reads the head alone while it can. Provided as `false`.
    ///
    /// A store that wraps another must forward this, [`notice_head`](Self::notice_head) and
    /// [`keep_layout`](Self::keep_layout) together (as it forwards [`notice`](Self::notice)
    /// and [`beat`](Self::beat)). One that does not runs as the one-row layout while its
    /// inner store keeps the head apart and writes layout 2 before its first beat: its
    /// instance then finds its own beats in the notice as another layout's, and, unless a
    /// one-row instance runs beside it, its subscriptions do not open (the error names these
    /// three calls).
    fn keeps_notice_head_apart(&self) -> bool {
        false
    }

    /// Writes in `stream`'s notice the layout this store keeps it in, once a subscription's
    /// read of the notice as it opens found no instance of another layout: an instance of a
    /// version that keeps the notice otherwise then refuses to open on the stream. Refused,
    /// with an error naming both layouts, when the notice already names another; a
    /// subscription whose write of its layout fails does not open (its beats would land where
    /// an instance of the other layout does not look). Provided as doing nothing: a store of
    /// the one-row layout writes none.
    ///
    /// # Errors
    ///
    /// A store failure, or another layout written first.
    fn keep_layout<'a>(&'a self, stream: &'a str) -> LeaseFuture<'a, ()> {
        let _ = stream;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Writes `owner`'s beat in `stream`'s notice: alive until `until_ms` (epoch milliseconds),
    /// and removes the beats and the [`announce`](Self::announce)d runs of `forget` (instances
    /// whose beats lapsed long ago). An owner's beat never moves back: when a later one stands
    /// (this write went out before it and lands late), nothing changes and the call answers
    /// `Ok`. Nothing else conditions it. Provided as doing nothing, for a store without notices.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        let _ = (stream, owner, until_ms, forget);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Records `record` (`<started ms>-<nonce>@<written ms>`: which run of `owner` this is, and
    /// when it wrote this) under `owner` in `stream`'s notice ([`Notice::incarnations`]), in place
    /// of what was there, and removes the beats and records of `forget` (instances gone for
    /// minutes), as [`beat`](Self::beat) does. Unconditional. The subscriptions record their run
    /// once they start (and again every few minutes while the notice does not show their beat),
    /// and judge every notice read after that:
    /// another run's record under their owner id means a second instance runs under it, and the
    /// later of the two pauses until the earlier is gone. Provided as doing nothing, for a store
    /// without notices (which then cannot find one owner id on two instances).
    ///
    /// # Errors
    ///
    /// A store failure.
    fn announce<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        record: &'a str,
        forget: &'a [String],
    ) -> LeaseFuture<'a, ()> {
        let _ = (stream, owner, record, forget);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Exactly once: the transactions that commit a handler's DynamoDB writes with this
    /// store's lease rows. `DynamoLeaseStore` answers them; a store that wraps another forwards
    /// the inner store's answer. Provided as `None`: an exactly-once subscription on such a store
    /// fails the start.
    #[cfg(feature = "dynamodb-lease")]
    fn transactions(&self) -> Option<super::Transactions> {
        None
    }

    /// Whether this store can keep leases alive by beat
    /// (`KinesisBroker::keep_leases_alive_by_beat`): it implements [`take_over`](Self::take_over),
    /// keeps notices ([`notice`](Self::notice)) whose beats ([`beat`](Self::beat)) never move
    /// back, removes a beat by [`leave_beat`](Self::leave_beat), marks requests by
    /// [`mark_asked`](Self::mark_asked) (without it, holders kept alive by beat never hear of a
    /// handoff: balancing moves nothing), and lists the rows ([`list`](Self::list)).
    /// `MemoryLeaseStore` and `DynamoLeaseStore` answer `true`; a store that wraps another
    /// forwards the inner store's answer. Provided as `false`: `connect` then refuses beat mode.
    fn keeps_leases_by_beat(&self) -> bool {
        false
    }

    /// Where the rows live, for the messages that name it: `DynamoLeaseStore` answers its
    /// table's name. Provided as `None`.
    fn table_name(&self) -> Option<&str> {
        None
    }

    /// Removes `owner`'s beat from `stream`'s notice and bumps its counter, as an instance that
    /// stops does: the instances that balance the shards count one fewer at once, and read the
    /// rows again. Provided as doing nothing, for a store without notices.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn leave<'a>(&'a self, stream: &'a str, owner: &'a str) -> LeaseFuture<'a, ()> {
        let _ = (stream, owner);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Removes `owner`'s beat from `stream`'s notice and bumps its counter, as
    /// [`leave`](Self::leave) does, unless the beat stands later than `until_ms` (the end of
    /// the last beat `owner` wrote): an instance kept alive by its beat leaves so once every
    /// reader of its ended, and a removal whose answer was lost, landing late, must not remove a
    /// later beat under the same owner (a subscription opened again in the same run beats under
    /// it). Refused, nothing changes, and the call answers `Ok`. Provided as doing nothing (the
    /// beat then lapses and is forgotten minutes later).
    ///
    /// # Errors
    ///
    /// A store failure.
    fn leave_beat<'a>(
        &'a self,
        stream: &'a str,
        owner: &'a str,
        until_ms: u64,
    ) -> LeaseFuture<'a, ()> {
        let _ = (stream, owner, until_ms);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Asks `holder` to hand `key`'s shard to `to`: records [`Handoff`](crate::Handoff)
    /// `{ to, asked_ms }` in the row, if `holder` holds it, its counter is still `counter` (the
    /// row the asker decided on: a late attempt of the request lands on no later lease), and no
    /// other live request stands ([`Handoff::is_live_at`](crate::Handoff::is_live_at) by
    /// `asked_ms`). The write bumps no counter, so the holder's own writes, conditioned on the
    /// counter they left, still land.
    /// Answers whether the request was recorded. Provided as recording nothing (`false`), for a
    /// store without handoffs: a balancing instance then waits for shards to come free.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn ask_handoff<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: &'a str,
        counter: u64,
        to: &'a str,
        asked_ms: u64,
    ) -> LeaseFuture<'a, bool> {
        let _ = (key, holder, counter, to, asked_ms);
        Box::pin(std::future::ready(Ok(false)))
    }

    /// Marks in `stream`'s notice that handoffs were asked of each of `holders` (adds one to
    /// each one's count in [`Notice::asks`]), after the requests landed in the rows: a holder
    /// kept alive by its beat ([`keeps_leases_by_beat`](Self::keeps_leases_by_beat)) writes
    /// nothing while idle, and hears of a request only here. An instance that balances by beat
    /// makes one call after each round's requests, whatever their number. Provided as marking
    /// nothing, for a store that keeps no leases by beat.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn mark_asked<'a>(&'a self, stream: &'a str, holders: &'a [String]) -> LeaseFuture<'a, ()> {
        let _ = (stream, holders);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Withdraws `to`'s request for a handoff of `key`'s shard, if it still stands in the
    /// row (an instance that stops withdraws its own, so no holder hands a shard to it). Bumps
    /// no counter. Answers whether it removed one. Provided as removing nothing (`false`).
    ///
    /// # Errors
    ///
    /// A store failure.
    fn withdraw_handoff<'a>(&'a self, key: &'a LeaseKey, to: &'a str) -> LeaseFuture<'a, bool> {
        let _ = (key, to);
        Box::pin(std::future::ready(Ok(false)))
    }

    /// Hands `owner`'s lease of `key` to `to`, who asked for it: one conditional write (held by
    /// `owner`, the request naming `to`) that records `checkpoint` (when `Some`), makes `to` the
    /// owner with a lease of `lease` from now, removes the request and bumps the counter; then
    /// bumps the stream's notice, as a release does, so `to` sees the row at its next poll and
    /// takes it (its take of a row it owns always succeeds), reading on after the checkpoint.
    ///
    /// Provided as the checkpoint followed by a [`release`](Self::release): the row comes free
    /// rather than handed, for a store that records no requests (and so is never asked this).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] when `owner` no longer holds the row or the request names another
    /// instance; a store failure otherwise.
    fn hand_over<'a>(
        &'a self,
        key: &'a LeaseKey,
        owner: &'a str,
        to: &'a str,
        checkpoint: Option<&'a str>,
        lease: Duration,
    ) -> LeaseFuture<'a, ()> {
        let _ = (to, lease);
        Box::pin(async move {
            if let Some(checkpoint) = checkpoint {
                self.checkpoint(key, owner, checkpoint).await?;
            }
            self.release(key, owner).await
        })
    }
}
