//! How long librdkafka takes to deliver a message again after a partition is paused and
//! resumed: the measurement behind the ingest worker holding off rather than pausing when its
//! memory budget is reached (docs/benchmarks.md).
//!
//! `cargo run --release --example resume_delay -- HOST:PORT [ROUNDS]` creates a topic of 8
//! partitions on the Kafka at HOST:PORT, fills it, and consumes it; every 50,000 messages it
//! pauses every partition for 200 ms, resumes them and prints how long the next message took.
//! The topic is deleted at the end.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use logstamp::config::{Settings, Sources};
use logstamp::ingest::kafka::{Outgoing, consumer_config, produce_all};

const PARTITIONS: i32 = 8;
const EVERY: u64 = 50_000;
const PAUSED_FOR: Duration = Duration::from_millis(200);

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(brokers) = args.next() else {
        bail!("usage: resume_delay HOST:PORT [ROUNDS]");
    };
    let rounds: u64 = args.next().map_or(Ok(5), |r| r.parse())?;
    let topic = format!("logstamp-resume-delay-{}", std::process::id());
    let runtime = tokio::runtime::Runtime::new()?;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()?;
    let options = AdminOptions::new();
    let new = NewTopic::new(&topic, PARTITIONS, TopicReplication::Fixed(1));
    for created in runtime.block_on(admin.create_topics([&new], &options))? {
        if let Err((_, code)) = created {
            bail!("creating topic {topic} on {brokers}: {code}");
        }
    }
    let result = measure(&brokers, &topic, rounds);
    runtime.block_on(admin.delete_topics(&[&topic], &options))?;
    result
}

fn measure(brokers: &str, topic: &str, rounds: u64) -> anyhow::Result<()> {
    let total = EVERY * (rounds + 1);
    let payload = vec![b'x'; 374];
    let messages = (0..total).map(|n| Outgoing {
        partition: Some((n % PARTITIONS as u64) as i32),
        key: None,
        payload: Some(payload.clone()),
    });
    produce_all(brokers, topic, messages)?;
    // A consumer as the ingest worker makes it (its prefetch and back-off included), on the
    // built-in defaults and not the environment's settings.
    let sources = Sources {
        env: Some(Default::default()),
        ..Sources::default()
    }
    .set("kafka.brokers", brokers)
    .set("kafka.group_id", topic);
    let settings = Settings::load(&sources)?;
    let consumer: BaseConsumer = consumer_config(&settings.kafka).create()?;
    consumer.subscribe(&[topic])?;
    let mut taken = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while taken < total {
        if Instant::now() > deadline {
            bail!("only {taken} of {total} messages in two minutes");
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        message.context("consuming")?;
        taken += 1;
        if taken % EVERY == 0 && taken < total {
            let assignment = consumer.assignment()?;
            consumer.pause(&assignment)?;
            let paused = Instant::now();
            while paused.elapsed() < PAUSED_FOR {
                // Served while paused: no message comes.
                let _ = consumer.poll(Duration::from_millis(10));
            }
            consumer.resume(&assignment)?;
            let resumed = Instant::now();
            loop {
                if Instant::now() > deadline {
                    bail!("no message after the resume");
                }
                if let Some(message) = consumer.poll(Duration::from_millis(1)) {
                    message.context("consuming")?;
                    taken += 1;
                    break;
                }
            }
            println!(
                "{{\"after_messages\":{},\"first_message_after_resume_ms\":{:.1}}}",
                taken - 1,
                resumed.elapsed().as_secs_f64() * 1000.0
            );
        }
    }
    Ok(())
}
