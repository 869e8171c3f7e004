//! Which shards this instance reads: the drivers of the pure [`coordinator`](crate::coordinator)
//! machines, which the driver owns ([`machines`]). `drive` executes what [`Rounds`] asks (when a
//! listing round or the handover poll runs, and their calls in order; each step's calls in
//! [`steps`]), `take_all` makes the calls each take of a pass asks (the lease, the start it
//! records, the first iterator, a hand-back; [`takes`]) and starts the shards' readers, and
//! `seek` positions the shards of a seek. Every decision on the answers is the
//! [`Coordinator`]'s.

mod machines;
mod seek;
mod steps;
mod takes;

use std::collections::HashSet;
use std::sync::Arc;

use crate::clock::Instant;

use futures::FutureExt;
use futures::future::join_all;

use crate::coordinator::machine::Coordinator;
use crate::coordinator::modes::SplitFleet;
use crate::coordinator::plan::Rows;
use crate::coordinator::rounds::{Rounds, Step};
use crate::coordinator::take::Told;
use crate::coordinator::twins::TwinNews;
use crate::delivery::outlet::Outlet;
use crate::kinesis::api::ShardInfo;
use crate::kinesis::fan_out::Consumer;
use crate::kinesis::iterator::ShardIterator;
use crate::lease::{LeaseKey, epoch_millis};
use crate::live::coordinator::machines::{Exit, Machines};
use crate::live::heard::Heard;
use crate::live::lock;
use crate::live::reader::{self, Reader, ShardEnv};
use crate::live::subscription::{Instance, Running, Subscription};
use crate::live::upkeep::Upkeep;
use crate::registry::StreamRegistration;
use crate::settings::position::ShardStart;
use crate::shard::{ShardHandle, ShardLease, ShardMachine};
use crate::{KinesisError, KinesisPosition, KinesisStream};

impl Subscription {
    fn reading(&self) -> HashSet<Arc<str>> {
        lock(&self.running).keys().cloned().collect()
    }

    /// The rows of `wanted`, a read each (in parallel); the shards whose row could not be read
    /// are reported and returned apart.
    async fn read_each(&self, wanted: &[Arc<str>]) -> (Rows, HashSet<Arc<str>>) {
        let mut rows = Rows::new();
        let mut unreadable = HashSet::new();
        let reads = join_all(wanted.iter().map(|shard| async move {
            let key = LeaseKey::new(Arc::clone(&self.stream), Arc::clone(shard));
            (Arc::clone(shard), self.store.read(&key).await)
        }))
        .await;
        for (shard, row) in reads {
            match row {
                Ok(row) => {
                    rows.insert(shard, row);
                }
                Err(err) => {
                    self.report(self.lease_error(&shard, err));
                    unreadable.insert(shard);
                }
            }
        }
        (rows, unreadable)
    }

    /// Hands each of `rows` (held by this run, a handoff asked in it) to its shard's reader, if
    /// it still reads it.
    fn hand_over_asked(&self, rows: &[(Arc<str>, crate::LeaseState)]) {
        let running = lock(&self.running);
        for (shard, row) in rows {
            if let Some(running) = running.get(shard) {
                running.handle.row_seen(row, &self.owner);
            }
        }
    }

    /// Tells the readers of the shards `listing` shows closed: with enhanced fan-out, where no
    /// event names child shards, their end is confirmed by polling.
    fn tell_closed(&self, listing: &[ShardInfo]) {
        let running = lock(&self.running);
        for shard in listing.iter().filter(|shard| shard.closed) {
            if let Some(running) = running.get(&shard.id) {
                running.handle.shard_closed();
            }
        }
    }

    /// Sets where shards without a checkpoint start (a seek of every shard): the
    /// shards skipped for starting at the tip are judged again.
    pub(crate) fn start_at(&self, initial: KinesisPosition) {
        self.hear(Heard::StartAt(initial));
    }

    /// Says what a take's refused answer means, `err` being the answer.
    fn tell(&self, shard: &Arc<str>, told: Told<Instant>, err: KinesisError) {
        match told {
            Told::Nothing => {}
            Told::Report => self.report(err),
            Told::Backoff(backoff) => {
                tracing::warn!(
                    stream = %self.stream,
                    shard = %shard,
                    failures = backoff.failures,
                    retry_in_ms = crate::lease::millis(backoff.until.saturating_duration_since(Instant::now())),
                    error = %err,
                    "taking the shard failed; it is tried again after a backoff"
                );
                self.tx.report(err);
            }
            Told::Throttled(until) => {
                // Counted as a throttled `acquire` in the lease-table call metrics.
                tracing::warn!(
                    stream = %self.stream,
                    shard = %shard,
                    retry_in_ms = crate::lease::millis(until.saturating_duration_since(Instant::now())),
                    error = %err,
                    "the lease table throttled a take: this instance's takes pause, and the shard \
                     is tried again at a later round; a table that throttles often needs more \
                     write capacity (or on-demand capacity)"
                );
            }
        }
    }

    /// Starts the reader of `shard`, taken with a lease sent at `sent` (`sent_ms` by the wall
    /// clock): its first read from `iterator`, at `start`. Answers how many seeks of every shard
    /// had been applied before this one joined the shards read.
    #[allow(clippy::too_many_arguments)]
    fn start_reader(
        self: &Arc<Self>,
        shard: &ShardInfo,
        key: LeaseKey,
        iterator: ShardIterator,
        start: &ShardStart,
        resume: ShardStart,
        sent: Instant,
        sent_ms: u64,
    ) -> u64 {
        // In process, the reader's tap counts for the harness what the shard holds from here.
        #[cfg(feature = "testing")]
        let harness = crate::shard::Harness::of(self.kinesis.tap(&iterator));
        #[cfg(not(feature = "testing"))]
        let harness = crate::shard::Harness::default();
        let mut lease = if self.timings.is_kept_by_beat() {
            // Kept alive by the chain that counted when the take was sent: the chain as it
            // stands now, if it began before the send (a chain begun since carries nothing).
            let grant = self.beats.as_ref().and_then(|beats| beats.grant());
            ShardLease::taken_by_beat(self.timings, sent, sent_ms, grant.as_ref())
        } else {
            ShardLease::taken(self.timings, sent, sent_ms)
        };
        if self.exactly_once {
            // Random per take: the tokens of this lease's commits are told from any other's.
            lease = lease.committing(rand::random());
        }
        let mut machine = ShardMachine::new(lease, self.read, iterator, resume);
        if shard.closed {
            machine.shard_closed();
        }
        let handle = ShardHandle::shared(key, Arc::clone(&self.broker_closed), machine, harness);
        #[cfg(feature = "dynamodb-lease")]
        if let Some(joints) = &self.joints {
            handle.join(Arc::clone(joints));
        }
        let cancel = self.cancel.child_token();
        let seeks_before = {
            let mut running = lock(&self.running);
            running.insert(
                Arc::clone(&shard.id),
                Running {
                    handle: Arc::clone(&handle),
                    cancel: cancel.clone(),
                },
            );
            // Under the lock the beat's driver hands its chain on under: no answer falls between.
            self.follow_beats(&handle);
            lock(&self.every_shard_seek).count
        };
        let env = Arc::new(ShardEnv::of(self, &shard.id));
        env.taken();
        tracing::info!(
            stream = %self.stream,
            shard = %shard.id,
            owner = %self.owner,
            start = %start,
            "lease taken; reading the shard"
        );
        let reader = Reader::new(env, handle, cancel);
        // Everything the reader's tasks log (its lease's release, handoff or loss, its
        // calls' failures) carries the shard it reads.
        let span = tracing::info_span!(
            "shard_reader",
            stream = %self.stream,
            shard = %shard.id,
            owner = %self.owner
        );
        self.spawn(tracing::Instrument::instrument(reader::run(reader), span));
        seeks_before
    }
}

/// Opens the subscription `source` describes on `instance` (its deliveries going out on `tx`,
/// read through the enhanced fan-out consumer `fan_out` if any) and runs it: its first round
/// runs before it is handed out (every shard this instance takes is positioned before anything
/// is published to it), and its coordinator from there. Fails when the stream cannot be listed,
/// or another application claimed it.
pub(crate) async fn start(
    instance: Instance,
    source: &KinesisStream,
    (fan_out, tx): (Option<Consumer>, Outlet),
    registration: &mut StreamRegistration,
) -> Result<Arc<Subscription>, KinesisError> {
    let (sub, coordinator) = Subscription::new(instance, source, fan_out, tx);
    // From here a later subscription to the stream waits for this one's tasks, whether or not
    // it opens: the readers its first round starts release their rows as it ends.
    registration.closes_with(sub.tasks());
    // Dropped however the coordinator ends (the first round failing, the caller going away, a
    // panic), it cancels the subscription and ends the beat.
    let exit = Exit::new(&sub);
    // The first round runs on the broker's runtime, where the SDK clients then keep their pooled
    // connections: a connection made on the caller's runtime dies with it, and the readers'
    // first calls would fail on it once a caller's runtime stopped. It is one of the
    // subscription's tasks.
    let first = Arc::clone(&sub);
    let machines = sub
        .spawn_joined(async move { first.first_round(coordinator, exit).await })
        .await
        .map_err(|_| KinesisError::ShutDown {
            what: "opening a subscription",
        })??;
    sub.spawn(run(Arc::clone(&sub), machines));
    #[cfg(feature = "dynamodb-lease")]
    if let (Some(joints), Some(transactions)) = (&sub.joints, &sub.transactions) {
        sub.spawn(crate::live::joint::commit_joints(
            Arc::clone(&sub),
            Arc::clone(joints),
            transactions.clone(),
        ));
    }
    Ok(sub)
}

/// Executes what `rounds` asks until the coordinator ends (`first`: until the first round is
/// over). The first round's `ListShards` failure is answered (a subscription to a stream that
/// cannot be listed fails); later ones are reported.
async fn drive(
    sub: &Arc<Subscription>,
    machines: &mut Machines,
    first: bool,
) -> Result<(), KinesisError> {
    let mut pause = sub.pause.watch();
    loop {
        if first && machines.rounds().first_round_over() {
            return Ok(());
        }
        // What fired while a call was under way counts from now on: the cancel, the instance's
        // pause, and (after the first round) a wake's permit, which the next round consumes
        // before a due poll.
        if sub.cancel.is_cancelled() {
            machines.rounds().cancel();
        }
        sub.follow_pause(machines);
        if !first && sub.wake.notified().now_or_never().is_some() {
            machines.rounds().wake();
        }
        let step = {
            let reading = sub.reading();
            let (rounds, coordinator) = machines.both(sub);
            if let Some(beats) = &sub.beats {
                // Nothing is taken while this instance's chain of beats does not count.
                coordinator.beat_counts(beats.counts_now());
            }
            let step = rounds.next(
                coordinator,
                &reading,
                &sub.owner,
                Instant::now(),
                epoch_millis(),
            );
            if let Some(split) = coordinator.split_news() {
                let err = sub.split_fleet(&split);
                if first {
                    // Refused while opening: nothing was taken.
                    return Err(err);
                }
                sub.report(err);
            }
            if let Some(layout) = coordinator.layout_news() {
                let err = sub.other_layout(layout, coordinator.notice_layout());
                if first {
                    return Err(err);
                }
                sub.report(err);
            }
            step
        };
        match step {
            Step::ListShards => sub.list_shards(machines, first).await?,
            Step::ListRows { eventual } => sub.list_rows(machines, eventual).await,
            Step::ReadRows(wanted) => sub.read_rows(machines, &wanted).await,
            Step::Delete(deletions) => sub.delete_rows(machines, &deletions).await,
            Step::ReadNotice { whole, consistent } => {
                sub.read_notice(machines, whole, consistent).await;
            }
            Step::Beat(beat) => sub.write_beat(machines, &beat).await,
            Step::Announce { record, forget } => sub.announce(machines, &record, &forget).await,
            Step::Twin(news) => sub.twin_news(news),
            Step::HandOver(rows) => sub.hand_over_asked(&rows),
            Step::Ask(asks) => sub.ask_handoffs(machines, &asks).await,
            Step::MarkAsked(holders) => sub.mark_asked(machines, &holders).await,
            Step::Take(takes) => sub.take_all(machines, takes).await,
            // The first round is over: the subscription is handed out.
            Step::Wait(_) if first => return Ok(()),
            Step::Wait(until) => {
                let timer = crate::clock::sleep_until(until);
                tokio::select! {
                    biased;
                    () = sub.cancel.cancelled() => machines.rounds().cancel(),
                    _ = pause.changed() => {}
                    () = sub.wake.notified() => machines.rounds().wake(),
                    () = timer => {}
                }
            }
            Step::Exit => return Ok(()),
        }
    }
}

impl Subscription {
    /// How one of the coordinator's upkeep calls answered: a WARN once per episode of failures
    /// ([`Upkeeps`](crate::live::upkeep::Upkeeps)).
    pub(in crate::live) fn upkeep<T>(&self, what: Upkeep, answer: &Result<T, crate::LeaseError>) {
        self.upkeeps
            .answered(&self.stream, what, answer, &self.meters);
    }

    /// Releases `shard`'s row if a holder handed it to this instance, which stops: read, taken
    /// (the take of a row it owns succeeds, and gives this store object the row's counter for
    /// the release's fence) and released, so another instance takes it at its next look.
    async fn hand_back_handed(&self, shard: Arc<str>) {
        let key = LeaseKey::new(Arc::clone(&self.stream), shard);
        let handed =
            matches!(self.store.read(&key).await, Ok(Some(row)) if row.is_held_by(&self.owner));
        if !handed {
            return;
        }
        let released = match self
            .store
            .acquire(&key, &self.owner, self.timings.row_lease())
            .await
        {
            Ok(_) => self.store.release(&key, &self.owner).await,
            Err(err) => Err(err),
        };
        match released {
            Ok(()) => {
                tracing::info!(lease = %key, "a shard handed to this stopping instance was handed back")
            }
            Err(err) => {
                tracing::warn!(lease = %key, error = %err, "handing back a shard handed to this stopping instance failed; it lapses with its lease")
            }
        }
    }

    /// What a fleet split between the two ways of keeping leases alive is told: the row that
    /// shows it, both ways, and the fix.
    fn split_fleet(&self, split: &SplitFleet) -> KinesisError {
        let way = |by_beat: bool| {
            if by_beat {
                "by beat (keep_leases_alive_by_beat(true))"
            } else {
                "by renewing each row (the default)"
            }
        };
        KinesisError::Config {
            message: format!(
                "stream {:?} on {}: shard {} is held by instance {:?}, which keeps its leases \
                 alive {}, while this instance ({:?}) keeps them alive {}; every instance on a \
                 stream must keep them alive the same way (a subscription that finds this as it \
                 opens does not open): give every instance the same \
                 KinesisBroker::keep_leases_alive_by_beat, and to change the way stop the fleet \
                 (or let its leases lapse) first",
                self.stream,
                self.table(),
                split.shard,
                split.holder,
                way(split.theirs_by_beat),
                self.owner,
                way(!split.theirs_by_beat),
            ),
        }
    }

    /// What a notice of another layout than this store's (`mine`) is told: the stream, the
    /// table, both layouts, and the fix.
    fn other_layout(&self, layout: u64, mine: u64) -> KinesisError {
        let layout = match layout {
            0 => "a layout it cannot read (notice_layout is not a whole number)".to_owned(),
            layout => format!("layout {layout}"),
        };
        KinesisError::Config {
            message: format!(
                "stream {:?} on {}: its notice row says its instances keep it in {layout}, \
                 while this instance (ruststream-kinesis {}) keeps layout {mine} (layout {} is \
                 one row; layout {} keeps the head apart, `DynamoLeaseStore::\
                 keep_notice_head_apart`); instances of the two cannot share the stream's leases \
                 (each would miss the other's beats), and a subscription that finds this as it \
                 opens does not open: run every instance on the stream with one version and one \
                 layout, and to change either stop the fleet (or let its leases lapse) first; a \
                 `LeaseStore` wrapper around a store that keeps the head apart must forward \
                 `keeps_notice_head_apart`, `notice_head` and `keep_layout`, or its instance \
                 takes its own beats for another layout's",
                self.stream,
                self.table(),
                env!("CARGO_PKG_VERSION"),
                crate::NOTICE_LAYOUT,
                crate::NOTICE_LAYOUT_APART,
            ),
        }
    }

    /// What the lease store's messages call it.
    fn table(&self) -> String {
        self.store.table_name().map_or_else(
            || "this lease store".to_owned(),
            |table| format!("lease table {table:?}"),
        )
    }

    /// What this subscription learned of another run under the instance's owner id: a later one
    /// is warned of (it pauses once it reads this run's record); an earlier one alive pauses
    /// the instance, and its end resumes it.
    fn twin_news(&self, news: TwinNews) {
        match news {
            TwinNews::Later(twin) => tracing::warn!(
                stream = %self.stream,
                owner = %self.owner,
                table = self.table(),
                theirs = %twin.theirs,
                mine = %twin.mine,
                "another instance runs under this owner id and started later; it pauses once it \
                 sees this one, which keeps its shards: give each instance an owner id of its own"
            ),
            TwinNews::Earlier(twin) => self.pause.hold(&self.stream, Some(twin)),
            TwinNews::Gone(twin) => {
                tracing::info!(
                    stream = %self.stream,
                    owner = %self.owner,
                    theirs = %twin.theirs,
                    "the earlier instance under this owner id is gone; reading again"
                );
                self.pause.hold(&self.stream, None);
            }
        }
    }

    /// Follows the instance's pause: while it is paused nothing is taken and every reader of
    /// this subscription stops (its final checkpoint written, its lease released); when it
    /// pauses, the subscription says why, once.
    fn follow_pause(&self, machines: &mut Machines) {
        let paused = self.pause.is_paused();
        let changed = machines.coordinator(self).set_paused(paused);
        if !paused {
            return;
        }
        for running in lock(&self.running).values() {
            running.cancel.cancel();
        }
        if !changed {
            return;
        }
        let Some(twin) = self.pause.twin() else {
            return;
        };
        let err = KinesisError::OwnerIdInUse {
            owner: self.owner.to_string(),
            table: self.table(),
            theirs: twin.theirs.to_string(),
            mine: twin.mine.to_string(),
        };
        tracing::error!(stream = %self.stream, error = %err, "pausing every reader of this instance");
        // Delivered even when the channel is full: the subscriber reads it once it drained.
        let tx = self.tx.clone();
        self.spawn(async move {
            tx.report_waiting(err).await;
        });
    }

    /// The subscription's first round, run before it is handed out; the coordinator's rounds
    /// from there. Fails when the stream cannot be listed.
    pub(crate) async fn first_round(
        self: &Arc<Self>,
        mut coordinator: Coordinator<Instant>,
        exit: Exit,
    ) -> Result<Machines, KinesisError> {
        // Before any take: a stream another application claimed is not this one's to read. A
        // claim that failed otherwise leaves each row's own claim to refuse the other.
        match self.store.claim(&self.stream).await {
            Ok(()) => {}
            Err(err @ crate::LeaseError::OtherApplication { .. }) => {
                return Err(self.lease_error("*", err));
            }
            Err(err) => tracing::warn!(
                stream = %self.stream,
                error = %err,
                "claiming the stream for this application failed; each row's claim still \
                 refuses another application"
            ),
        }
        // The notice before the first plan: it judges the rows kept alive by beat by their
        // holders' beats (a live one is not taken over, and a holder keeping its leases the
        // other way refuses this subscription) rather than count every such holder gone.
        // A notice of another layout refuses the subscription here, before its beat writes
        // into a notice another version keeps. A failed read opens a store of the one-row
        // layout (a later notice read reports the layout, and no take-over judges a holder of
        // that layout gone); a store that keeps the head apart writes its layout next, which
        // only a read that found none of the other may allow, so its failed read refuses.
        match self.store.notice(&self.stream).await {
            Ok(Some(notice)) => {
                coordinator.take_notice_read(&notice, epoch_millis());
                if let Some(layout) = coordinator.layout_news() {
                    return Err(self.other_layout(layout, coordinator.notice_layout()));
                }
            }
            Err(err) if self.store.keeps_notice_head_apart() => {
                return Err(self.lease_error("*", err));
            }
            Ok(None) | Err(_) => {}
        }
        // Its layout in the notice, for an instance of another to find as it opens, before its
        // first beat: a beat where an instance of the other layout looks for none, with no
        // layout to tell it so, would be missed, and its holders' rows taken from live readers.
        // So a failure refuses the subscription.
        if let Err(err) = self.store.keep_layout(&self.stream).await {
            return Err(self.lease_error("*", err));
        }
        if self.beats.is_some() {
            // The beat next: the first round takes shards only once a chain of beats counts.
            self.spawn(crate::live::beat::run(Arc::clone(self)));
        }
        let rounds = Rounds::new(
            self.timings.listing_interval(),
            self.timings.handover_poll_interval(),
            Instant::now(),
        );
        let mut machines = Machines::new(rounds, coordinator, exit);
        if let Some(beats) = &self.beats {
            beats.first_chain(self.timings.lease(), &self.cancel).await;
        }
        if let Err(err) = drive(self, &mut machines, true).await {
            // Failed, this subscription holds the instance paused no longer.
            self.pause.hold(&self.stream, None);
            return Err(err);
        }
        Ok(machines)
    }
}

/// Lists and takes every listing interval, sooner when a reader ended or the handover poll sees
/// a shard to take, until cancelled: what `rounds` asks.
pub(crate) async fn run(sub: Arc<Subscription>, mut machines: Machines) {
    let _ = drive(&sub, &mut machines, false).await;
    exit(&sub, &mut machines).await;
    // Dropped here, the machines end the subscription's beat once its readers ended.
    drop(machines);
}

/// What the coordinator does as it stops: withdraws its standing requests for handoffs, hands
/// back what was handed to it meanwhile, and removes its beat (balancing, leases renewed per
/// row: a beat that keeps leases alive stops on its own once the readers ended).
async fn exit(sub: &Arc<Subscription>, machines: &mut Machines) {
    let paused = sub.pause.is_paused();
    // A subscription that ends holds the instance paused no longer: the others judge their own
    // streams' notices.
    sub.pause.hold(&sub.stream, None);
    if paused {
        // Paused for an earlier run under the owner id: the requests and the beat under it are
        // that run's too.
        return;
    }
    let reading = sub.reading();
    let standing = machines
        .coordinator(sub)
        .standing_asks(&sub.owner, epoch_millis(), &reading);
    for shard in &standing {
        let key = LeaseKey::new(Arc::clone(&sub.stream), Arc::clone(shard));
        if let Err(err) = sub.store.withdraw_handoff(&key, &sub.owner).await {
            tracing::warn!(lease = %key, error = %err, "withdrawing a request for a handoff failed as this instance stops; a holder that hands the shard over to it before the request lapses leaves the shard unread for a lease");
        }
    }
    // A holder that handed a shard over before the withdrawal landed made the row this
    // instance's, which reads nothing any more: handed back at once, not left to lapse.
    for shard in standing {
        sub.hand_back_handed(shard).await;
    }
    if machines.coordinator(sub).is_balancing() && sub.beats.is_none() {
        // The others count one instance fewer at once, and read the rows for the shards this
        // one releases.
        if let Err(err) = sub.store.leave(&sub.stream, &sub.owner).await {
            tracing::warn!(stream = %sub.stream, error = %err, "removing this instance's beat failed as it stops; the others count it until its beat lapses (within a lease)");
        }
    }
}
