//! Consumer groups of one member, answered as Kafka answers them.
//!
//! When a member of a stable group joins again (its subscription changed, or its first
//! assignment was made before it knew the topic's partitions, as kafka-python's often is), a
//! Kafka broker waits for the group's other members to rejoin, and with none answers at once.
//! The mock always waits its session timeout less a second (9 s at 10 s, 44 s at kafka-python's
//! default 45 s) before it answers any rejoin, and then does not always finish the sync. So the
//! forwarder answers the rejoin of a group's only member itself: the mock's generation, the
//! member as leader, its own metadata; then that member's SyncGroup, with the assignment it
//! made for itself. The mock's group stays as it was, stable in that generation, so its
//! heartbeats and offset commits go on being the mock's.
//!
//! What a group has is learned from the mock's JoinGroup answers (the leader's lists every
//! member); any join the forwarder does not answer, or a member leaving, makes it unknown
//! again until the mock's next answer.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use bytes::{Buf, BufMut};

use super::{Malformed, RequestHeader, array, nullable_string, put_string};

pub const JOIN_GROUP: i16 = 11;
const LEAVE_GROUP: i16 = 13;
const SYNC_GROUP: i16 = 14;

/// What the forwarder knows of each group (by ID), shared by every connection.
#[derive(Debug, Default)]
pub struct Groups(Mutex<HashMap<String, Group>>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    generation: i32,
    protocol: String,
    /// The group's only member (and so its leader), when it has one member.
    alone: Option<String>,
    /// That member rejoined through the forwarder, which then answers its SyncGroup too.
    rejoined: bool,
}

/// What to do with a group request.
#[derive(Debug, PartialEq, Eq)]
pub enum GroupRoute {
    /// Answer it here with this frame.
    Answer(Vec<u8>),
    /// Forward it, and learn the group from the mock's answer.
    Watch(Joining),
}

/// A JoinGroup forwarded to the mock, whose answer tells what the group has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joining {
    group: String,
    version: i16,
    correlation_id: i32,
}

impl Groups {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        // A panic elsewhere left the map whole: each change is one insert or remove.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The route of a group request (JoinGroup v0 to v5, SyncGroup v0 to v3, LeaveGroup), or
    /// `None` for any other request, whose route is the forwarder's usual one.
    pub fn route(&self, frame: &[u8]) -> Result<Option<GroupRoute>, Malformed> {
        let mut buf = frame;
        let header = RequestHeader::parse(&mut buf)?;
        match header.api_key {
            JOIN_GROUP => self.join(&header, &mut buf).map(Some),
            SYNC_GROUP => self.sync(&header, &mut buf),
            LEAVE_GROUP => {
                let group = nullable_string(&mut buf)?.unwrap_or_default();
                self.lock().remove(&group);
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    fn join(&self, header: &RequestHeader, buf: &mut &[u8]) -> Result<GroupRoute, Malformed> {
        let short = Malformed("a short JoinGroup request");
        let group = nullable_string(buf)?.unwrap_or_default();
        buf.try_get_i32().map_err(|_| short)?; // session timeout
        if header.version >= 1 {
            buf.try_get_i32().map_err(|_| short)?; // rebalance timeout
        }
        let member = nullable_string(buf)?.unwrap_or_default();
        let instance = if header.version >= 5 {
            nullable_string(buf)?
        } else {
            None
        };
        nullable_string(buf)?; // protocol type
        let protocols = array(buf, |buf| Ok((nullable_string(buf)?, bytes(buf)?)))?;
        let mut groups = self.lock();
        let known = groups
            .get_mut(&group)
            .filter(|g| !member.is_empty() && g.alone.as_deref() == Some(member.as_str()));
        let offered = known.and_then(|g| {
            let metadata = protocols
                .iter()
                .find(|(name, _)| name.as_deref() == Some(g.protocol.as_str()))?;
            Some((g, metadata.1.clone()))
        });
        let Some((known, metadata)) = offered else {
            // A new member, or one of several: the mock's to answer. Until it has, the group
            // is not known to have one member.
            if let Some(g) = groups.get_mut(&group) {
                g.alone = None;
                g.rejoined = false;
            }
            return Ok(GroupRoute::Watch(Joining {
                group,
                version: header.version,
                correlation_id: header.correlation_id,
            }));
        };
        known.rejoined = true;
        let mut out = Vec::new();
        out.put_i32(header.correlation_id);
        if header.version >= 2 {
            out.put_i32(0); // throttle time
        }
        out.put_i16(0);
        out.put_i32(known.generation);
        put_string(&mut out, &known.protocol)?;
        put_string(&mut out, &member)?; // leader
        put_string(&mut out, &member)?;
        out.put_i32(1);
        put_string(&mut out, &member)?;
        if header.version >= 5 {
            put_nullable_string(&mut out, instance.as_deref())?;
        }
        put_bytes(&mut out, metadata.as_deref())?;
        Ok(GroupRoute::Answer(out))
    }

    /// Answers the SyncGroup of a member whose rejoin was answered here; `None` forwards it.
    fn sync(
        &self,
        header: &RequestHeader,
        buf: &mut &[u8],
    ) -> Result<Option<GroupRoute>, Malformed> {
        let short = Malformed("a short SyncGroup request");
        let group = nullable_string(buf)?.unwrap_or_default();
        let generation = buf.try_get_i32().map_err(|_| short)?;
        let member = nullable_string(buf)?.unwrap_or_default();
        if header.version >= 3 {
            nullable_string(buf)?; // group instance ID
        }
        let assignments = array(buf, |buf| Ok((nullable_string(buf)?, bytes(buf)?)))?;
        let mut groups = self.lock();
        let Some(known) = groups.get_mut(&group).filter(|g| {
            g.rejoined && g.generation == generation && g.alone.as_deref() == Some(&member)
        }) else {
            return Ok(None);
        };
        known.rejoined = false;
        let own = assignments
            .into_iter()
            .find(|(to, _)| to.as_deref() == Some(member.as_str()))
            .and_then(|(_, assignment)| assignment);
        let mut out = Vec::new();
        out.put_i32(header.correlation_id);
        if header.version >= 1 {
            out.put_i32(0); // throttle time
        }
        out.put_i16(0);
        put_bytes(&mut out, Some(own.as_deref().unwrap_or_default()))?;
        Ok(Some(GroupRoute::Answer(out)))
    }

    /// Learns the group from the mock's answer to a forwarded JoinGroup: its generation and
    /// protocol, and its only member when the answer is the leader's and lists one.
    pub fn joined(&self, joining: &Joining, answer: &[u8]) -> Result<(), Malformed> {
        let short = Malformed("a short JoinGroup answer");
        let mut buf = answer;
        if buf.try_get_i32().map_err(|_| short)? != joining.correlation_id {
            return Ok(());
        }
        if joining.version >= 2 {
            buf.try_get_i32().map_err(|_| short)?; // throttle time
        }
        if buf.try_get_i16().map_err(|_| short)? != 0 {
            return Ok(());
        }
        let generation = buf.try_get_i32().map_err(|_| short)?;
        let protocol = nullable_string(&mut buf)?.unwrap_or_default();
        let leader = nullable_string(&mut buf)?;
        let member = nullable_string(&mut buf)?;
        let members = array(&mut buf, |buf| {
            let id = nullable_string(buf)?;
            if joining.version >= 5 {
                nullable_string(buf)?;
            }
            bytes(buf)?;
            Ok(id)
        })?;
        // Only the leader's answer lists the members.
        let alone = (leader.is_some() && leader == member && members.len() == 1)
            .then_some(member)
            .flatten();
        self.lock().insert(
            joining.group.clone(),
            Group {
                generation,
                protocol,
                alone,
                rejoined: false,
            },
        );
        Ok(())
    }
}

/// Kafka's `BYTES` (a four-byte length, -1 for null).
fn bytes(buf: &mut &[u8]) -> Result<Option<Vec<u8>>, Malformed> {
    let len = buf.try_get_i32().map_err(|_| Malformed("short bytes"))?;
    let Ok(len) = usize::try_from(len) else {
        return Ok(None);
    };
    let data = buf.get(..len).ok_or(Malformed("short bytes"))?.to_vec();
    buf.advance(len);
    Ok(Some(data))
}

fn put_bytes(out: &mut Vec<u8>, data: Option<&[u8]>) -> Result<(), Malformed> {
    match data {
        Some(data) => {
            out.put_i32(i32::try_from(data.len()).map_err(|_| Malformed("bytes too long"))?);
            out.put_slice(data);
        }
        None => out.put_i32(-1),
    }
    Ok(())
}

fn put_nullable_string(out: &mut Vec<u8>, s: Option<&str>) -> Result<(), Malformed> {
    match s {
        Some(s) => put_string(out, s),
        None => {
            out.put_i16(-1);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::request;
    use super::*;

    /// A JoinGroup v5 of `member` offering `range` with `metadata`.
    fn join(member: &str, metadata: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        put_string(&mut body, "g").unwrap();
        body.put_i32(10_000);
        body.put_i32(300_000);
        put_string(&mut body, member).unwrap();
        body.put_i16(-1); // no instance ID
        put_string(&mut body, "consumer").unwrap();
        body.put_i32(1);
        put_string(&mut body, "range").unwrap();
        put_bytes(&mut body, Some(metadata)).unwrap();
        request(JOIN_GROUP, 5, &body)
    }

    /// The mock's v5 answer to the leader `m1`, listing `members`.
    fn mock_answer(generation: i32, members: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_i32(7);
        out.put_i32(0);
        out.put_i16(0);
        out.put_i32(generation);
        for s in ["range", "m1", "m1"] {
            put_string(&mut out, s).unwrap();
        }
        out.put_i32(members.len() as i32);
        for m in members {
            put_string(&mut out, m).unwrap();
            out.put_i16(-1);
            put_bytes(&mut out, Some(b"meta")).unwrap();
        }
        out
    }

    fn sync(generation: i32, member: &str, assignment: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        put_string(&mut body, "g").unwrap();
        body.put_i32(generation);
        put_string(&mut body, member).unwrap();
        body.put_i16(-1);
        body.put_i32(1);
        put_string(&mut body, member).unwrap();
        put_bytes(&mut body, Some(assignment)).unwrap();
        request(SYNC_GROUP, 3, &body)
    }

    fn watched(route: Option<GroupRoute>) -> Joining {
        match route {
            Some(GroupRoute::Watch(joining)) => joining,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_only_members_rejoin_and_sync_are_answered_here_in_the_mocks_generation() {
        let groups = Groups::default();
        // The first join is the mock's; its answer says the group has one member.
        let first = watched(groups.route(&join("", b"old")).unwrap());
        groups.joined(&first, &mock_answer(2, &["m1"])).unwrap();
        // Its first sync was the mock's too.
        assert_eq!(groups.route(&sync(2, "m1", b"none")).unwrap(), None);
        // The rejoin: generation 2, m1 leading, its new metadata.
        let answer = match groups.route(&join("m1", b"new")).unwrap() {
            Some(GroupRoute::Answer(answer)) => answer,
            other => panic!("{other:?}"),
        };
        let mut expected = Vec::new();
        expected.put_i32(7);
        expected.put_i32(0);
        expected.put_i16(0);
        expected.put_i32(2);
        for s in ["range", "m1", "m1"] {
            put_string(&mut expected, s).unwrap();
        }
        expected.put_i32(1);
        put_string(&mut expected, "m1").unwrap();
        expected.put_i16(-1);
        put_bytes(&mut expected, Some(b"new")).unwrap();
        assert_eq!(answer, expected);
        // Its sync gets back the assignment it made itself.
        let mut synced = Vec::new();
        synced.put_i32(7);
        synced.put_i32(0);
        synced.put_i16(0);
        put_bytes(&mut synced, Some(b"all")).unwrap();
        assert_eq!(
            groups.route(&sync(2, "m1", b"all")).unwrap(),
            Some(GroupRoute::Answer(synced))
        );
        // A second sync, or one of another generation, is the mock's.
        assert_eq!(groups.route(&sync(2, "m1", b"all")).unwrap(), None);
    }

    #[test]
    fn groups_of_several_or_changing_members_are_the_mocks() {
        let groups = Groups::default();
        let first = watched(groups.route(&join("", b"m")).unwrap());
        groups
            .joined(&first, &mock_answer(3, &["m1", "m2"]))
            .unwrap();
        watched(groups.route(&join("m1", b"m")).unwrap());
        // One member, then another joins: the first one's rejoin goes to the mock.
        groups.joined(&first, &mock_answer(4, &["m1"])).unwrap();
        watched(groups.route(&join("", b"m")).unwrap());
        watched(groups.route(&join("m1", b"m")).unwrap());
        // One member that leaves: the group is forgotten.
        groups.joined(&first, &mock_answer(5, &["m1"])).unwrap();
        let mut leave = Vec::new();
        put_string(&mut leave, "g").unwrap();
        put_string(&mut leave, "m1").unwrap();
        assert_eq!(
            groups.route(&request(LEAVE_GROUP, 1, &leave)).unwrap(),
            None
        );
        watched(groups.route(&join("m1", b"m")).unwrap());
        // Requests of other kinds are not the groups'.
        assert_eq!(groups.route(&request(3, 1, &[])).unwrap(), None);
    }
}
