//! Consumer groups on Apache Kafka under both of its protocols: the classic one, where the
//! members assign partitions among themselves (logstamp asks for cooperative-sticky), and
//! KIP-848's `group.protocol=consumer`, where the broker assigns them. Under each, `logstamp
//! ingest` processes store every message exactly once while workers join and are SIGKILLed
//! mid-batch, and through a rolling restart of the whole fleet; Kafka's own `kafka-groups`
//! tool then says which protocol the group ran.

mod support;

use std::time::Duration;

use support::TestDb;
use support::ingest::{COUNT_ALL, GroupProtocol, Process, Setup, TOPIC};
use support::kafka::Kafka;

const PARTITIONS: i32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_group_stores_exactly_once_through_kills_joins_and_a_rolling_restart() {
    exactly_once_through_kills_joins_and_a_rolling_restart(GroupProtocol::Classic, "Classic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip_848_group_stores_exactly_once_through_kills_joins_and_a_rolling_restart() {
    exactly_once_through_kills_joins_and_a_rolling_restart(GroupProtocol::Consumer, "Consumer")
        .await;
}

async fn exactly_once_through_kills_joins_and_a_rolling_restart(
    protocol: GroupProtocol,
    group_type: &str,
) {
    let kafka = Kafka::start();
    kafka.create_topic(TOPIC, PARTITIONS).await;
    let db = TestDb::create(&format!("groups_{}", group_type.to_lowercase())).await;
    let setup = Setup::with_protocol(
        db,
        &kafka.bootstrap_servers(),
        protocol,
        &[("batch.max_rows", "1000")],
    )
    .await;
    let n: u64 = 120_000;
    let third = n / 3;

    // Run numbers name the workers' log files: the fleet's apart from those of the workers
    // killed below (0 and 1).
    let mut fleet = Vec::new();
    for run in 0..3 {
        fleet.push(setup.spawn_process_holding_partitions(100 + run).await);
    }
    setup.feed(0, third, PARTITIONS).await;

    // A fourth worker joins, takes partitions from the others, and is SIGKILLed a few batches
    // later, twice, while the next third arrives: its partitions go back to the others once
    // the group notices it is gone.
    tokio::join!(
        setup.feed(third, 2 * third, PARTITIONS),
        setup.kill_processes_at_random_points(2, COUNT_ALL, 2 * third)
    );

    // A rolling restart while the last third arrives: each worker in turn is stopped (SIGTERM:
    // it commits what it read and leaves the group) and replaced, and the replacement holds
    // partitions before the next one stops.
    let rolling = async {
        for run in 0..3 {
            let old: Process = fleet.remove(0);
            let status = old.terminate(Duration::from_secs(60));
            assert!(status.success(), "{status}");
            fleet.push(setup.spawn_process_holding_partitions(110 + run).await);
        }
    };
    tokio::join!(setup.feed(2 * third, n, PARTITIONS), rolling);

    setup.wait_for(COUNT_ALL, n, Duration::from_secs(240)).await;
    for worker in fleet {
        let status = worker.terminate(Duration::from_secs(60));
        assert!(status.success(), "{status}");
    }
    let leased: Vec<u32> = (2..=20).collect();
    setup.assert_exactly_once(n, &leased).await;
    assert_eq!(
        kafka.group_types().get("ingest-test").map(String::as_str),
        Some(group_type),
        "the group's protocol, as Kafka reports it"
    );
}
