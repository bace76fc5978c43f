//! Exactly once across restarts and failovers: which transactions of a source data centre an
//! applier applies, skips, or cannot place.
//!
//! Binlog positions differ from server to server, so they cannot tell a transaction published
//! again after a failover from a new one. MariaDB's GTIDs do not: a replica with
//! `log_slave_updates` logs each transaction under its original GTID, and once promoted goes on
//! in each replication domain from the last sequence number. So an applier keeps, per source
//! and replication domain, the GTID of the last transaction it applied (`relay_applied_gtids`,
//! written in the transaction that applies it), and each message names the GTID capture
//! published before it in its domain (`stream.published`). A transaction is
//!
//! - applied when it follows exactly what was applied in its domain;
//! - skipped when its sequence number is not above the one applied (capture published it again
//!   after a restart; the same GTID, or an older one);
//! - not placed otherwise: it follows a transaction this applier never applied (a gap: messages
//!   are missing), or the source went on from another history (a failover to a server that
//!   lacked transactions already relayed, a domain whose numbers went back). The applier then
//!   stops applying that source, visibly, until the source's stream is started anew.
//!
//! Capture publishes only some transactions (the relayed tables' changes, less what the loop
//! filter drops), so sequence numbers have gaps by design: only `stream.published` tells a
//! missing transaction from one that was never published. `relay reset` starts a new epoch
//! (numbered by the `seq` of its first transaction) whose first transaction follows nothing;
//! an applier takes it up from there.

use super::change::Stream;
use super::gtid::{Gtid, GtidState};

/// How far an applier is in a source's stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Followed {
    pub epoch: u64,
    /// Per replication domain, the last GTID applied in this epoch.
    pub applied: GtidState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Apply it; this is how far the applier is once it did.
    Apply(Followed),
    /// Already applied: it was published again.
    Applied,
    /// It cannot be placed after what was applied: why.
    Unordered(String),
}

/// What to do with a transaction of `source_dc` with GTID `gtid` and stream bookkeeping
/// `stream`, given how far the applier is.
pub fn order(followed: &Followed, source_dc: &str, gtid: Option<Gtid>, stream: &Stream) -> Verdict {
    let Some(gtid) = gtid else {
        return Verdict::Unordered(format!(
            "the transaction carries no GTID, so it cannot be placed after what was applied \
             (it was not published by this logstamp's capture); {}",
            fix(source_dc)
        ));
    };
    let d = gtid.domain;
    let after = |applied: &GtidState| {
        Verdict::Apply(Followed {
            epoch: stream.epoch,
            applied: applied.with(gtid),
        })
    };
    if stream.epoch > followed.epoch {
        // A stream started anew by `relay reset`: its first transaction follows nothing.
        return if stream.published.is_empty() {
            after(&GtidState::default())
        } else {
            Verdict::Unordered(format!(
                "transaction {gtid} is in epoch {} of {source_dc}'s stream, after {}, but this \
                 applier never saw that epoch's first transaction (it applied epoch {}); {}",
                stream.epoch,
                stream.published,
                followed.epoch,
                fix(source_dc)
            ))
        };
    }
    if stream.epoch < followed.epoch {
        return Verdict::Unordered(format!(
            "transaction {gtid} is in epoch {} of {source_dc}'s stream, but epoch {} was \
             applied here: is a capture that was replaced still publishing to the topic? {}",
            stream.epoch,
            followed.epoch,
            fix(source_dc)
        ));
    }
    let applied = followed.applied.get(d);
    let before = stream.published.get(d);
    match applied {
        Some(a) if gtid.seq < a.seq || gtid == a => return Verdict::Applied,
        Some(a) if gtid.seq == a.seq => {
            return Verdict::Unordered(format!(
                "transaction {gtid} has the sequence number of {a}, which was applied here: \
                 {source_dc}'s binlog in domain {d} is not the history that was relayed \
                 (a failover to a server that lacked relayed transactions?); {}",
                fix(source_dc)
            ));
        }
        _ => {}
    }
    if before == applied {
        return after(&followed.applied);
    }
    let published = before.map_or("nothing".to_string(), |g| g.to_string());
    let done = applied.map_or("nothing".to_string(), |g| g.to_string());
    let why = match (before, applied) {
        (Some(b), Some(a)) if b.seq > a.seq => format!(
            "the transactions of {source_dc} after {a} up to {b} never reached this applier"
        ),
        (Some(_), None) => {
            format!("the transactions of {source_dc} up to {published} never reached this applier")
        }
        _ => format!(
            "{source_dc}'s binlog in domain {d} is not the history that was relayed (a failover \
             to a server that lacked relayed transactions, or a domain whose sequence numbers \
             went back)"
        ),
    };
    Verdict::Unordered(format!(
        "transaction {gtid} follows {published} in domain {d}, but {done} was applied here: \
         {why}; {}",
        fix(source_dc)
    ))
}

/// The way out, the same for every case: the README's procedure.
fn fix(source_dc: &str) -> String {
    format!(
        "applying from {source_dc} stops until its stream is started anew: stop writing to \
         the relayed tables, run `logstamp relay reset` in {source_dc}, and copy \
         {source_dc}'s relayed tables to the others once the relays caught up (README: \
         \"Starting a stream anew\")"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(text: &str) -> Option<Gtid> {
        Some(text.parse().unwrap())
    }

    fn state(text: &str) -> GtidState {
        text.parse().unwrap()
    }

    fn stream(epoch: u64, published: &str) -> Stream {
        Stream {
            run: None,
            epoch,
            published: state(published),
            binlog: GtidState::default(),
        }
    }

    fn followed(epoch: u64, applied: &str) -> Followed {
        Followed {
            epoch,
            applied: state(applied),
        }
    }

    fn unordered(verdict: Verdict) -> String {
        match verdict {
            Verdict::Unordered(why) => why,
            other => panic!("placed: {other:?}"),
        }
    }

    #[test]
    fn the_next_transaction_of_a_domain_is_applied() {
        let f = followed(0, "0-1-10,1-1-4");
        assert_eq!(
            order(&f, "a", g("0-1-15"), &stream(0, "0-1-10,1-1-4")),
            Verdict::Apply(followed(0, "0-1-15,1-1-4"))
        );
        // Only its own domain must agree: domains are ordered on their own.
        assert_eq!(
            order(&f, "a", g("1-1-9"), &stream(0, "0-1-12,1-1-4")),
            Verdict::Apply(followed(0, "0-1-10,1-1-9"))
        );
        // The first transaction ever, and the first of a new domain.
        assert_eq!(
            order(&Followed::default(), "a", g("0-1-3"), &stream(0, "")),
            Verdict::Apply(followed(0, "0-1-3"))
        );
        assert_eq!(
            order(&f, "a", g("2-1-1"), &stream(0, "0-1-10")),
            Verdict::Apply(followed(0, "0-1-10,1-1-4,2-1-1"))
        );
    }

    #[test]
    fn a_promoted_replica_goes_on_from_the_same_numbers() {
        // a1 (server 1) published up to 0-1-500; a2 (server 2) took over.
        let f = followed(0, "0-1-500");
        assert_eq!(
            order(&f, "a", g("0-2-501"), &stream(0, "0-1-500")),
            Verdict::Apply(followed(0, "0-2-501"))
        );
        // Published again from a2's binlog, which holds a1's transactions under their GTIDs.
        assert_eq!(
            order(&f, "a", g("0-1-480"), &stream(0, "0-1-470")),
            Verdict::Applied
        );
        assert_eq!(
            order(&f, "a", g("0-1-500"), &stream(0, "0-1-480")),
            Verdict::Applied
        );
    }

    #[test]
    fn a_gap_stops_with_what_is_missing() {
        let why = unordered(order(
            &followed(0, "0-1-10"),
            "a",
            g("0-1-30"),
            &stream(0, "0-1-20"),
        ));
        assert!(
            why.contains("after 0-1-10 up to 0-1-20 never reached"),
            "{why}"
        );
        assert!(why.contains("logstamp relay reset"), "{why}");
        let why = unordered(order(
            &Followed::default(),
            "a",
            g("0-1-30"),
            &stream(0, "0-1-20"),
        ));
        assert!(why.contains("up to 0-1-20 never reached"), "{why}");
    }

    #[test]
    fn another_history_stops() {
        // a2 lacked 0-1-481..500, which b applied, and numbered its own from 481.
        let f = followed(0, "0-1-500");
        let why = unordered(order(&f, "a", g("0-2-500"), &stream(0, "0-2-499")));
        assert!(why.contains("sequence number of 0-1-500"), "{why}");
        let why = unordered(order(&f, "a", g("0-2-501"), &stream(0, "0-2-500")));
        assert!(why.contains("not the history that was relayed"), "{why}");
        // Capture that forgot what it published.
        let why = unordered(order(&f, "a", g("0-1-600"), &stream(0, "")));
        assert!(why.contains("follows nothing in domain 0"), "{why}");
    }

    #[test]
    fn a_new_epoch_starts_from_nothing() {
        // After RESET MASTER the numbers start again; `relay reset` began epoch 900.
        let f = followed(0, "0-1-500");
        assert_eq!(
            order(&f, "a", g("0-1-3"), &stream(900, "")),
            Verdict::Apply(followed(900, "0-1-3"))
        );
        let why = unordered(order(&f, "a", g("0-1-9"), &stream(900, "0-1-3")));
        assert!(
            why.contains("never saw that epoch's first transaction"),
            "{why}"
        );
        let why = unordered(order(
            &followed(900, "0-1-3"),
            "a",
            g("0-1-501"),
            &stream(0, "0-1-500"),
        ));
        assert!(why.contains("epoch 900 was applied"), "{why}");
    }

    #[test]
    fn no_gtid_cannot_be_placed() {
        let why = unordered(order(&Followed::default(), "a", None, &stream(0, "")));
        assert!(why.contains("no GTID"), "{why}");
    }
}
