//! dev-broker's front door: a Kafka-protocol forwarder to librdkafka's mock broker that fills
//! the mock's gaps, so that clients other than librdkafka can use it too.
//!
//! - **ApiVersions newer than the mock's.** A broker answers one with a v0 response that names
//!   the versions it knows, and the client asks again (KIP-511). The mock sends that answer
//!   with a one-byte count where v0 has four bytes, which kafka-python cannot decode, so it
//!   never gets past bootstrap. The forwarder answers these requests itself; the mock is held
//!   to [`API_VERSIONS_MAX`], whose answers it encodes right.
//! - **CreateTopics**, which the mock does not serve: the forwarder creates the topic in the
//!   mock (versions 0 to 4, the ones without flexible encoding) and adds the request to the
//!   mock's ApiVersions answer, so admin clients (and the relay) can create topics.
//! - **Versions the mock offers but misreads** (the group requests' flexible ones): the
//!   forwarder takes them out of its ApiVersions answer.
//! - **The controller.** The mock's Metadata answers name broker 0, which does not exist, as
//!   the controller; admin clients send CreateTopics to the controller, so the forwarder names
//!   a broker that does.
//! - **Rejoining a group of one.** The mock answers any rejoin only after its session timeout
//!   less a second; the forwarder answers the rejoin of a group's only member at once, as Kafka
//!   does ([`groups`]).
//!
//! Every other request passes through unchanged. Kafka answers the requests of a connection in
//! order, and clients rely on it: the answers the forwarder makes take their request's place
//! among the mock's.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, BufMut};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use logstamp::ingest::local_cluster::{LocalCluster, LocalClusterError};

mod groups;

use groups::{GroupRoute, Groups, Joining};

const PRODUCE: i16 = 0;
const METADATA: i16 = 3;
pub const API_VERSIONS: i16 = 18;
const CREATE_TOPICS: i16 = 19;

/// The newest ApiVersions the mock is held to: its flexible (v3) answers are malformed.
pub const API_VERSIONS_MAX: i16 = 2;
/// The newest versions the mock reads right, where it offers newer ones: those librdkafka's
/// own client sends. The mock's flexible versions of the group requests misread them (JoinGroup
/// v6 takes the protocols' count for four bytes, and drops the connection).
const READ_RIGHT: [(i16, i16); 5] = [
    (10, 2), // FindCoordinator
    (11, 5), // JoinGroup
    (12, 3), // Heartbeat
    (13, 1), // LeaveGroup
    (14, 3), // SyncGroup
];
/// The newest CreateTopics served: v5 and later use the flexible encoding.
const CREATE_TOPICS_MAX: i16 = 4;
/// The largest request or answer taken (a broker's default `socket.request.max.bytes`).
const MAX_FRAME: usize = 100 << 20;
/// Partitions of a topic created without a count, as a broker's default `num.partitions`.
const DEFAULT_PARTITIONS: i32 = 1;

// Kafka's error codes.
const INVALID_TOPIC: i16 = 17;
const UNSUPPORTED_VERSION: i16 = 35;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICATION_FACTOR: i16 = 38;
const UNKNOWN_SERVER_ERROR: i16 = -1;

/// Forwards every connection to `listener` to the mock broker at `broker`.
pub async fn serve(listener: TcpListener, broker: SocketAddr, cluster: Arc<LocalCluster>) {
    let groups = Arc::new(Groups::default());
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(e) => {
                tracing::warn!("accepting a connection: {e}");
                // Out of file descriptors, say: give connections time to close.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let cluster = cluster.clone();
        let groups = groups.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(client, broker, &cluster, &groups).await {
                tracing::debug!("a forwarded connection ended: {e}");
            }
        });
    }
}

/// Who answers a request.
#[derive(Debug)]
enum Answer {
    /// The mock; its answer is corrected or learnt from, if `fix` says so.
    Mock { fix: Option<Fix> },
    /// The forwarder, with this frame.
    Here(Vec<u8>),
}

/// What the forwarder does with an answer of the mock.
#[derive(Debug)]
enum Fix {
    /// Corrects the answer to this ApiVersions or Metadata request.
    Correct(RequestHeader),
    /// Learns the group from the answer to this JoinGroup.
    Learn(Joining),
}

async fn connection(
    client: TcpStream,
    broker: SocketAddr,
    cluster: &LocalCluster,
    groups: &Groups,
) -> io::Result<()> {
    let upstream = TcpStream::connect(broker).await?;
    let (client_in, client_out) = client.into_split();
    let (mock_in, mock_out) = upstream.into_split();
    let (answers, queue) = mpsc::unbounded_channel();
    tokio::try_join!(
        requests(client_in, mock_out, answers, cluster, groups),
        answers_in_order(mock_in, client_out, queue, groups),
    )?;
    Ok(())
}

/// Reads the client's requests: forwards those the mock answers, answers the others, and
/// queues who answers each, in order.
async fn requests(
    mut client: impl AsyncRead + Unpin,
    mut mock: impl AsyncWrite + Unpin,
    answers: mpsc::UnboundedSender<Answer>,
    cluster: &LocalCluster,
    groups: &Groups,
) -> io::Result<()> {
    while let Some(frame) = read_frame(&mut client).await? {
        let answer = match groups.route(&frame).map_err(malformed)? {
            Some(GroupRoute::Answer(answer)) => Some(Answer::Here(answer)),
            Some(GroupRoute::Watch(joining)) => {
                write_frame(&mut mock, &frame).await?;
                Some(Answer::Mock {
                    fix: Some(Fix::Learn(joining)),
                })
            }
            None => forwarded(&frame, &mut mock, cluster).await?,
        };
        if let Some(answer) = answer {
            // The other half is gone only if it failed: its error is the one to report.
            if answers.send(answer).is_err() {
                break;
            }
        }
    }
    mock.shutdown().await
}

/// Routes a request that is not the groups': forwards it to the mock or answers it; returns
/// who answers, if anyone does.
async fn forwarded(
    frame: &[u8],
    mock: &mut (impl AsyncWrite + Unpin),
    cluster: &LocalCluster,
) -> io::Result<Option<Answer>> {
    Ok(match route(frame).map_err(malformed)? {
        Route::Answer(answer) => Some(Answer::Here(answer)),
        Route::CreateTopics => Some(Answer::Here(
            create_topics(frame, cluster).map_err(malformed)?,
        )),
        Route::Mock { answered } => {
            write_frame(mock, frame).await?;
            answered.then(|| Answer::Mock {
                fix: answer_to_fix(frame).map(Fix::Correct),
            })
        }
    })
}

/// Sends the client each answer in the order of its requests.
async fn answers_in_order(
    mock: impl AsyncRead + Unpin,
    mut client: impl AsyncWrite + Unpin,
    mut queue: mpsc::UnboundedReceiver<Answer>,
    groups: &Groups,
) -> io::Result<()> {
    let hung_up = || io::Error::new(io::ErrorKind::UnexpectedEof, "the mock broker hung up");
    let mut mock = BufReader::new(mock);
    loop {
        let answer = if mock.buffer().is_empty() {
            tokio::select! {
                answer = queue.recv() => answer,
                // The mock hangs up (on a request it cannot read, say) with nothing owed: the
                // client learns it at once, as from a broker, by this connection ending.
                read = mock.fill_buf() => {
                    if read?.is_empty() {
                        return Err(hung_up());
                    }
                    // An answer ahead of its place in the queue, which follows at once.
                    continue;
                }
            }
        } else {
            queue.recv().await
        };
        let Some(answer) = answer else { break };
        let frame = match answer {
            Answer::Here(frame) => frame,
            Answer::Mock { fix } => {
                let frame = read_frame(&mut mock).await?.ok_or_else(hung_up)?;
                match fix {
                    Some(Fix::Correct(request)) => fixed(frame, &request).map_err(malformed)?,
                    Some(Fix::Learn(joining)) => {
                        groups.joined(&joining, &frame).map_err(malformed)?;
                        frame
                    }
                    None => frame,
                }
            }
        };
        write_frame(&mut client, &frame).await?;
    }
    client.shutdown().await
}

/// A frame's content (without its length), or `None` at the end of the stream.
async fn read_frame(stream: &mut (impl AsyncRead + Unpin)) -> io::Result<Option<Vec<u8>>> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let size = usize::try_from(i32::from_be_bytes(size))
        .ok()
        .filter(|n| *n <= MAX_FRAME)
        .ok_or_else(|| malformed(Malformed("a frame size out of range")))?;
    let mut frame = vec![0; size];
    stream.read_exact(&mut frame).await?;
    Ok(Some(frame))
}

async fn write_frame(stream: &mut (impl AsyncWrite + Unpin), frame: &[u8]) -> io::Result<()> {
    let size = i32::try_from(frame.len()).map_err(|_| malformed(Malformed("a frame too long")))?;
    stream.write_all(&size.to_be_bytes()).await?;
    stream.write_all(frame).await
}

/// A request or answer that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Malformed(&'static str);

fn malformed(e: Malformed) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("Kafka protocol: {}", e.0),
    )
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// Forward it; `answered`: the mock answers it (all but a produce with `acks=0`).
    Mock {
        answered: bool,
    },
    /// Answer it with this frame.
    Answer(Vec<u8>),
    CreateTopics,
}

fn route(frame: &[u8]) -> Result<Route, Malformed> {
    let mut buf = frame;
    let header = RequestHeader::parse(&mut buf)?;
    Ok(match header.api_key {
        API_VERSIONS if header.version > API_VERSIONS_MAX => {
            Route::Answer(api_versions_unsupported(header.correlation_id))
        }
        CREATE_TOPICS => Route::CreateTopics,
        PRODUCE => Route::Mock {
            answered: produce_acks(&header, &mut buf)? != 0,
        },
        _ => Route::Mock { answered: true },
    })
}

/// The header of a request whose answer from the mock needs correcting.
fn answer_to_fix(frame: &[u8]) -> Option<RequestHeader> {
    let mut buf = frame;
    RequestHeader::parse(&mut buf)
        .ok()
        .filter(|h| matches!(h.api_key, API_VERSIONS | METADATA))
}

/// The mock's answer to `request`, corrected.
fn fixed(frame: Vec<u8>, request: &RequestHeader) -> Result<Vec<u8>, Malformed> {
    // An answer out of order is left alone (the mock sends none before a connection's first).
    if frame.get(..4) != Some(&request.correlation_id.to_be_bytes()[..]) {
        return Ok(frame);
    }
    match request.api_key {
        API_VERSIONS => offered(frame),
        _ => with_a_controller(frame, request.version),
    }
}

#[derive(Debug)]
struct RequestHeader {
    api_key: i16,
    version: i16,
    correlation_id: i32,
}

impl RequestHeader {
    /// Reads the header up to the client ID, which every version has.
    fn parse(buf: &mut &[u8]) -> Result<RequestHeader, Malformed> {
        let short = Malformed("a short request header");
        let header = RequestHeader {
            api_key: buf.try_get_i16().map_err(|_| short)?,
            version: buf.try_get_i16().map_err(|_| short)?,
            correlation_id: buf.try_get_i32().map_err(|_| short)?,
        };
        nullable_string(buf)?;
        Ok(header)
    }
}

/// A produce request's `acks`: with 0 the broker sends no answer.
fn produce_acks(header: &RequestHeader, buf: &mut &[u8]) -> Result<i16, Malformed> {
    // Produce is flexible from v9: the header ends with tagged fields, and strings are compact.
    let flexible = header.version >= 9;
    if flexible {
        tagged_fields(buf)?;
    }
    if header.version >= 3 {
        // The transactional ID.
        if flexible {
            compact_nullable_string(buf)?;
        } else {
            nullable_string(buf)?;
        }
    }
    buf.try_get_i16()
        .map_err(|_| Malformed("a produce request without acks"))
}

/// A v0 ApiVersions answer refusing the request's version and naming the ones served.
fn api_versions_unsupported(correlation_id: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.put_i32(correlation_id);
    out.put_i16(UNSUPPORTED_VERSION);
    out.put_i32(1);
    out.put_i16(API_VERSIONS);
    out.put_i16(0);
    out.put_i16(API_VERSIONS_MAX);
    out
}

/// The mock's ApiVersions answer (v0 to v2: error, array, then v1+ throttle time) with the
/// versions it reads right: each capped at [`READ_RIGHT`], and CreateTopics added.
fn offered(frame: Vec<u8>) -> Result<Vec<u8>, Malformed> {
    let short = Malformed("a short ApiVersions answer");
    let mut buf = &frame[4..];
    if buf.try_get_i16().map_err(|_| short)? != 0 {
        return Ok(frame);
    }
    let count = usize::try_from(buf.try_get_i32().map_err(|_| short)?).map_err(|_| short)?;
    let mut entries = buf.get(..count.saturating_mul(6)).ok_or(short)?;
    let rest = &buf[entries.len()..];
    let mut apis = Vec::with_capacity(count + 1);
    while entries.has_remaining() {
        let (key, min, max) = (entries.get_i16(), entries.get_i16(), entries.get_i16());
        let cap = READ_RIGHT.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        apis.push((key, min, cap.map_or(max, |cap| max.min(cap))));
    }
    if !apis.iter().any(|(key, ..)| *key == CREATE_TOPICS) {
        apis.push((CREATE_TOPICS, 0, CREATE_TOPICS_MAX));
    }
    let mut out = Vec::with_capacity(frame.len() + 6);
    out.put_slice(&frame[..6]);
    out.put_i32(i32::try_from(apis.len()).map_err(|_| short)?);
    for (key, min, max) in apis {
        out.put_i16(key);
        out.put_i16(min);
        out.put_i16(max);
    }
    out.put_slice(rest);
    Ok(out)
}

/// The mock's Metadata answer naming a broker of the answer as the controller, where it named
/// none of them.
fn with_a_controller(mut frame: Vec<u8>, version: i16) -> Result<Vec<u8>, Malformed> {
    if version < 1 {
        return Ok(frame); // v0 names no controller
    }
    let short = Malformed("a short Metadata answer");
    let flexible = version >= 9;
    let mut buf = &frame[4..];
    if flexible {
        tagged_fields(&mut buf)?;
    }
    if version >= 3 {
        buf.try_get_i32().map_err(|_| short)?; // throttle time
    }
    let count = if flexible {
        usize::try_from(uvarint(&mut buf)?.saturating_sub(1)).map_err(|_| short)?
    } else {
        usize::try_from(buf.try_get_i32().map_err(|_| short)?).unwrap_or(0)
    };
    let string = |buf: &mut &[u8]| {
        if flexible {
            compact_nullable_string(buf)
        } else {
            nullable_string(buf)
        }
    };
    let mut brokers = Vec::new();
    for _ in 0..count {
        brokers.push(buf.try_get_i32().map_err(|_| short)?);
        string(&mut buf)?; // host
        buf.try_get_i32().map_err(|_| short)?; // port
        string(&mut buf)?; // rack
        if flexible {
            tagged_fields(&mut buf)?;
        }
    }
    if version >= 2 {
        string(&mut buf)?; // cluster ID
    }
    let at = frame.len() - buf.remaining();
    let controller = buf.try_get_i32().map_err(|_| short)?;
    if let Some(first) = brokers.first().filter(|_| !brokers.contains(&controller)) {
        frame[at..at + 4].copy_from_slice(&first.to_be_bytes());
    }
    Ok(frame)
}

/// Creates the topics of a CreateTopics request (v0 to v4) in the mock; returns the answer.
fn create_topics(frame: &[u8], cluster: &LocalCluster) -> Result<Vec<u8>, Malformed> {
    let mut buf = frame;
    let header = RequestHeader::parse(&mut buf)?;
    if header.version > CREATE_TOPICS_MAX {
        return Err(Malformed("a CreateTopics version that was not offered"));
    }
    let topics = array(&mut buf, parse_new_topic)?;
    let _timeout_ms = buf.try_get_i32().map_err(|_| Malformed("no timeout"))?;
    let validate_only = header.version >= 1
        && buf
            .try_get_i8()
            .map_err(|_| Malformed("no validate_only"))?
            != 0;
    let mut out = Vec::new();
    out.put_i32(header.correlation_id);
    if header.version >= 2 {
        out.put_i32(0); // throttle time
    }
    out.put_i32(i32::try_from(topics.len()).map_err(|_| Malformed("too many topics"))?);
    for topic in topics {
        // The mock's call is a quick hand-over to its thread.
        let (code, message) = match topic.check() {
            Err(refused) => refused,
            Ok(_) if validate_only => (0, None),
            Ok(partitions) => match cluster.create_topic(&topic.name, partitions) {
                Ok(()) => (0, None),
                Err(e) => (error_code(&e), Some(e.to_string())),
            },
        };
        put_string(&mut out, &topic.name)?;
        out.put_i16(code);
        if header.version >= 1 {
            match message {
                Some(m) => put_string(&mut out, &m)?,
                None => out.put_i16(-1),
            }
        }
    }
    Ok(out)
}

/// A topic to create, as requested.
struct NewTopic {
    name: String,
    partitions: i32,
    replication_factor: i16,
    /// Replica assignments: their partition count, and whether each names only this broker.
    assigned: usize,
    assigned_here: bool,
}

impl NewTopic {
    /// The partition count to create, or the refusal: an error code and why.
    fn check(&self) -> Result<i32, (i16, Option<String>)> {
        let refuse = |code, why: &str| Err((code, Some(why.to_string())));
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if self.name.is_empty()
            || self.name.len() > 249
            || self.name == "."
            || self.name == ".."
            || !self.name.chars().all(legal)
        {
            return refuse(
                INVALID_TOPIC,
                "a topic name is 1 to 249 of a-z, A-Z, 0-9, '.', '_', '-'",
            );
        }
        if self.assigned > 0 {
            if !self.assigned_here {
                return refuse(
                    INVALID_REPLICATION_FACTOR,
                    "this cluster has one broker, ID 1",
                );
            }
            return i32::try_from(self.assigned)
                .or_else(|_| refuse(INVALID_PARTITIONS, "too many partitions"));
        }
        if !matches!(self.replication_factor, -1 | 1) {
            return refuse(
                INVALID_REPLICATION_FACTOR,
                "this cluster has one broker: the replication factor is 1",
            );
        }
        match self.partitions {
            -1 => Ok(DEFAULT_PARTITIONS),
            n if n >= 1 => Ok(n),
            _ => refuse(INVALID_PARTITIONS, "a topic needs at least one partition"),
        }
    }
}

fn parse_new_topic(buf: &mut &[u8]) -> Result<NewTopic, Malformed> {
    let short = Malformed("a short CreateTopics request");
    let name = nullable_string(buf)?.ok_or(Malformed("a topic without a name"))?;
    let partitions = buf.try_get_i32().map_err(|_| short)?;
    let replication_factor = buf.try_get_i16().map_err(|_| short)?;
    let assignments = array(buf, |buf| {
        let _partition = buf.try_get_i32().map_err(|_| short)?;
        array(buf, |buf| buf.try_get_i32().map_err(|_| short))
    })?;
    // Topic settings: nothing in the mock to apply them to.
    array(buf, |buf| {
        nullable_string(buf)?;
        nullable_string(buf)
    })?;
    Ok(NewTopic {
        name,
        partitions,
        replication_factor,
        assigned: assignments.len(),
        assigned_here: assignments.iter().all(|brokers| brokers == &[1]),
    })
}

/// A broker error of the mock as Kafka's error code.
fn error_code(e: &LocalClusterError) -> i16 {
    match e {
        // librdkafka's codes for broker errors are Kafka's.
        LocalClusterError::Operation { code, .. } => i16::try_from(*code as i32)
            .ok()
            .filter(|c| *c > 0)
            .unwrap_or(UNKNOWN_SERVER_ERROR),
        LocalClusterError::Start(_) => UNKNOWN_SERVER_ERROR,
    }
}

fn array<T>(
    buf: &mut &[u8],
    mut item: impl FnMut(&mut &[u8]) -> Result<T, Malformed>,
) -> Result<Vec<T>, Malformed> {
    let count = buf.try_get_i32().map_err(|_| Malformed("a short array"))?;
    // -1 is a null array; a count beyond the bytes left is a lie, not a reason to allocate.
    let count = usize::try_from(count).unwrap_or(0);
    if count > buf.remaining() {
        return Err(Malformed("an array longer than its request"));
    }
    (0..count).map(|_| item(buf)).collect()
}

fn nullable_string(buf: &mut &[u8]) -> Result<Option<String>, Malformed> {
    let len = buf.try_get_i16().map_err(|_| Malformed("a short string"))?;
    match usize::try_from(len) {
        Err(_) => Ok(None),
        Ok(len) => take_string(buf, len).map(Some),
    }
}

fn compact_nullable_string(buf: &mut &[u8]) -> Result<Option<String>, Malformed> {
    match uvarint(buf)? {
        0 => Ok(None),
        n => take_string(
            buf,
            usize::try_from(n - 1).map_err(|_| Malformed("a long string"))?,
        )
        .map(Some),
    }
}

fn take_string(buf: &mut &[u8], len: usize) -> Result<String, Malformed> {
    let bytes = buf.get(..len).ok_or(Malformed("a short string"))?;
    let text = String::from_utf8(bytes.to_vec()).map_err(|_| Malformed("a string not UTF-8"))?;
    buf.advance(len);
    Ok(text)
}

fn tagged_fields(buf: &mut &[u8]) -> Result<(), Malformed> {
    for _ in 0..uvarint(buf)? {
        uvarint(buf)?;
        let size = usize::try_from(uvarint(buf)?).map_err(|_| Malformed("a long tag"))?;
        if size > buf.remaining() {
            return Err(Malformed("a short tagged field"));
        }
        buf.advance(size);
    }
    Ok(())
}

fn uvarint(buf: &mut &[u8]) -> Result<u64, Malformed> {
    let mut value = 0u64;
    for shift in (0..35).step_by(7) {
        let byte = buf.try_get_u8().map_err(|_| Malformed("a short varint"))?;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Malformed("a varint longer than five bytes"))
}

fn put_string(out: &mut Vec<u8>, s: &str) -> Result<(), Malformed> {
    out.put_i16(i16::try_from(s.len()).map_err(|_| Malformed("a string too long"))?);
    out.put_slice(s.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request frame: its header (correlation ID 7, client "client"), then `body`.
    pub(super) fn request(api_key: i16, version: i16, body: &[u8]) -> Vec<u8> {
        let mut frame = Vec::new();
        frame.put_i16(api_key);
        frame.put_i16(version);
        frame.put_i32(7);
        put_string(&mut frame, "client").unwrap();
        frame.put_slice(body);
        frame
    }

    #[test]
    fn a_newer_api_versions_request_is_refused_in_v0_naming_the_versions_served() {
        let answer = match route(&request(API_VERSIONS, 4, &[0, 0, 0])).unwrap() {
            Route::Answer(answer) => answer,
            other => panic!("{other:?}"),
        };
        // correlation ID, UNSUPPORTED_VERSION, one entry (four-byte count): ApiVersions 0..=2.
        assert_eq!(answer, [0, 0, 0, 7, 0, 35, 0, 0, 0, 1, 0, 18, 0, 0, 0, 2]);
        assert_eq!(
            route(&request(API_VERSIONS, 2, &[])).unwrap(),
            Route::Mock { answered: true }
        );
    }

    #[test]
    fn only_a_produce_without_acks_goes_unanswered() {
        // v9 (flexible): header tags, compact null transactional ID, acks.
        let v9 = |acks: i16| request(PRODUCE, 9, &[&[0u8, 0][..], &acks.to_be_bytes()].concat());
        assert_eq!(route(&v9(0)).unwrap(), Route::Mock { answered: false });
        assert_eq!(route(&v9(-1)).unwrap(), Route::Mock { answered: true });
        // v3: a null transactional ID (length -1), then acks.
        let v3 = request(PRODUCE, 3, &[0xff, 0xff, 0, 0]);
        assert_eq!(route(&v3).unwrap(), Route::Mock { answered: false });
        assert_eq!(
            route(&request(PRODUCE, 2, &[0, 1])).unwrap(),
            Route::Mock { answered: true }
        );
        assert!(route(&request(PRODUCE, 2, &[])).is_err());
    }

    #[test]
    fn the_api_versions_answer_offers_create_topics_and_only_versions_read_right() {
        let mut answer = Vec::new();
        answer.put_i32(7);
        answer.put_i16(0);
        answer.put_i32(2);
        for (key, min, max) in [(0i16, 0i16, 10i16), (11, 0, 6)] {
            answer.put_i16(key);
            answer.put_i16(min);
            answer.put_i16(max);
        }
        answer.put_i32(0); // throttle time
        let mut expected = Vec::new();
        expected.put_i32(7);
        expected.put_i16(0);
        expected.put_i32(3);
        for (key, min, max) in [(0i16, 0i16, 10i16), (11, 0, 5), (19, 0, 4)] {
            expected.put_i16(key);
            expected.put_i16(min);
            expected.put_i16(max);
        }
        expected.put_i32(0);
        assert_eq!(offered(answer).unwrap(), expected);
    }

    #[test]
    fn a_metadata_answer_names_a_broker_that_exists_as_the_controller() {
        // v12: header tags, throttle, one broker (1, "h", 9092, no rack, tags), cluster ID
        // "c", controller 0, then the topics (none) and tags.
        let mut answer = Vec::new();
        answer.put_i32(7);
        answer.put_u8(0);
        answer.put_i32(0);
        answer.put_u8(2);
        answer.put_i32(1);
        answer.put_slice(&[2, b'h']);
        answer.put_i32(9092);
        answer.put_slice(&[0, 0]);
        answer.put_slice(&[2, b'c']);
        answer.put_i32(0);
        answer.put_slice(&[1, 0]);
        let fixed = with_a_controller(answer.clone(), 12).unwrap();
        let at = answer.len() - 6;
        assert_eq!(fixed[at..at + 4], 1i32.to_be_bytes());
        assert_eq!(fixed[..at], answer[..at]);
    }

    #[tokio::test]
    async fn answers_keep_the_order_of_their_requests_and_a_hang_up_ends_the_connection() {
        let (mock, mut mock_end) = tokio::io::duplex(1024);
        let (client, mut client_end) = tokio::io::duplex(1024);
        let (answers, queue) = mpsc::unbounded_channel();
        let groups = Groups::default();
        let forwarding =
            tokio::spawn(async move { answers_in_order(mock, client, queue, &groups).await });
        // The mock's answer arrives before its place in the queue is known.
        write_frame(&mut mock_end, b"mock").await.unwrap();
        tokio::task::yield_now().await;
        answers.send(Answer::Here(b"here".to_vec())).unwrap();
        answers.send(Answer::Mock { fix: None }).unwrap();
        for expected in [&b"here"[..], b"mock"] {
            let frame = read_frame(&mut client_end).await.unwrap().unwrap();
            assert_eq!(frame, expected);
        }
        // Nothing owed, the mock hangs up: so does the forwarder, though the client did not.
        drop(mock_end);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), forwarding)
            .await
            .expect("the forwarder noticed the hang-up")
            .unwrap();
        assert_eq!(ended.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        drop(answers);
    }

    #[test]
    fn a_new_topic_is_checked_as_a_one_broker_cluster_would() {
        let topic = |name: &str, partitions, replication_factor| NewTopic {
            name: name.into(),
            partitions,
            replication_factor,
            assigned: 0,
            assigned_here: true,
        };
        assert_eq!(topic("logs", 3, 1).check(), Ok(3));
        assert_eq!(topic("logs", -1, -1).check(), Ok(DEFAULT_PARTITIONS));
        assert_eq!(
            topic("logs", 0, 1).check().unwrap_err().0,
            INVALID_PARTITIONS
        );
        assert_eq!(
            topic("logs", 1, 3).check().unwrap_err().0,
            INVALID_REPLICATION_FACTOR
        );
        assert_eq!(topic("a/b", 1, 1).check().unwrap_err().0, INVALID_TOPIC);
        let assigned = NewTopic {
            assigned: 2,
            ..topic("logs", -1, -1)
        };
        assert_eq!(assigned.check(), Ok(2));
    }
}
