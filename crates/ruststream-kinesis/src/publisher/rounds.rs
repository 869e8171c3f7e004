//! The writer's rounds in flight: which records a new round may send beside the rounds already
//! out. Kinesis orders the records of a shard by arrival, so two calls in flight at once may
//! land in either order: a record whose route (its partition key, or a packed record's shard) a
//! round in flight carries waits for that round to end, and the records of one key keep their
//! publish order.

use std::collections::{HashMap, HashSet};

use super::Pending;

/// The routes of each stream that the rounds in flight carry (each in one round only).
#[derive(Debug, Default)]
pub(super) struct Routes {
    busy: HashMap<String, HashSet<String>>,
}

impl Routes {
    /// Splits `pending`, the records of `stream` in publish order, into those a new round sends
    /// (answered) and those whose route a round in flight carries, appended to `held` in order.
    /// The routes the new round carries are busy from now until [`release`](Self::release):
    /// they are answered beside the records.
    pub(super) fn claim(
        &mut self,
        stream: &str,
        pending: Vec<Pending>,
        held: &mut Vec<Pending>,
    ) -> (Vec<Pending>, HashSet<String>) {
        let busy = self.busy.get(stream);
        let mut claimed = HashSet::new();
        let mut go = Vec::with_capacity(pending.len());
        for record in pending {
            // Several records of one route in the new round all go: the round writes them in
            // order itself (one a call).
            if busy.is_some_and(|busy| busy.contains(record.route())) {
                held.push(record);
            } else {
                if !claimed.contains(record.route()) {
                    claimed.insert(record.route().to_owned());
                }
                go.push(record);
            }
        }
        if !claimed.is_empty() {
            self.busy
                .entry(stream.to_owned())
                .or_default()
                .extend(claimed.iter().cloned());
        }
        (go, claimed)
    }

    /// The round that carried `claimed` of `stream` is over: their records may go again.
    pub(super) fn release(&mut self, stream: &str, claimed: &HashSet<String>) {
        if let Some(busy) = self.busy.get_mut(stream) {
            busy.retain(|route| !claimed.contains(route));
            if busy.is_empty() {
                self.busy.remove(stream);
            }
        }
    }

    /// Whether no round carries anything.
    #[cfg(test)]
    fn is_idle(&self) -> bool {
        self.busy.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinesis::api::OutRecord;

    fn record(key: &str, data: &str) -> Pending {
        Pending {
            stream: "orders".to_owned(),
            record: OutRecord {
                data: bytes::Bytes::from(data.to_owned()),
                partition_key: key.to_owned(),
                explicit_hash_key: None,
            },
            done: Vec::new(),
            shard: None,
        }
    }

    fn data(records: &[Pending]) -> Vec<&[u8]> {
        records.iter().map(|p| &p.record.data[..]).collect()
    }

    #[test]
    fn a_record_of_a_route_in_flight_waits_in_order_and_goes_once_its_round_is_over() {
        let mut routes = Routes::default();
        let mut held = Vec::new();
        let (first, first_routes) = routes.claim(
            "orders",
            vec![record("a", "a0"), record("a", "a1"), record("b", "b0")],
            &mut held,
        );
        assert_eq!(
            data(&first),
            [b"a0", b"a1", b"b0"],
            "one round takes a key twice"
        );
        assert!(held.is_empty());

        let (second, second_routes) = routes.claim(
            "orders",
            vec![record("a", "a2"), record("c", "c0"), record("a", "a3")],
            &mut held,
        );
        assert_eq!(data(&second), [b"c0"], "only the key no round carries goes");
        assert_eq!(data(&held), [b"a2", b"a3"], "the rest waits, in order");
        // Another stream's key `a` is another route.
        let mut other = record("a", "x0");
        other.stream = "payments".to_owned();
        let (third, third_routes) = routes.claim("payments", vec![other], &mut held);
        assert_eq!(data(&third), [b"x0"]);

        routes.release("orders", &first_routes);
        let waiting = std::mem::take(&mut held);
        let (fourth, fourth_routes) = routes.claim("orders", waiting, &mut held);
        assert_eq!(data(&fourth), [b"a2", b"a3"]);
        assert!(held.is_empty());

        routes.release("orders", &second_routes);
        routes.release("payments", &third_routes);
        routes.release("orders", &fourth_routes);
        assert!(routes.is_idle(), "every route released");
    }

    #[test]
    fn a_packed_record_s_route_is_its_shard() {
        let mut routes = Routes::default();
        let mut held = Vec::new();
        let mut packed = record("a", "pack-0");
        packed.record.explicit_hash_key = Some("0".to_owned());
        let (_, claimed) = routes.claim("orders", vec![packed], &mut held);
        assert_eq!(claimed, HashSet::from(["0".to_owned()]));
        let mut next = record("b", "pack-1");
        next.record.explicit_hash_key = Some("0".to_owned());
        let (go, _) = routes.claim("orders", vec![next, record("a", "plain")], &mut held);
        assert_eq!(data(&go), [b"plain"], "the shard's next aggregate waits");
        assert_eq!(data(&held), [b"pack-1"]);
    }
}
