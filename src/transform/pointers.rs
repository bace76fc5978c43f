//! The JSON pointers a pipeline reads (columns, routing conditions), compiled once: looked up
//! in a parsed document, or taken from a message's text in one pass that builds no document.
//!
//! The one-pass reading keeps serde_json's behaviour exactly: the same texts are accepted and
//! refused with the same errors (every value is still parsed, only not kept), a pointer finds
//! what [`Json::pointer`] would find in the parsed document (the last of duplicate keys, array
//! elements by index), and the nesting depth is measured as [`super::depth`] does.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

use super::{MAX_JSON_DEPTH, MapError, depth};
use crate::store::residual::{Token, follow, parse_pointer as parse};

/// What each slot's pointer found: the document's own value, or one taken from a text.
pub type Found<'a> = Vec<Option<Cow<'a, Json>>>;

/// A set of pointers, each with a slot: values found are returned in slot order.
#[derive(Debug, Clone, Default)]
pub struct Pointers {
    /// Each slot's pointer as written.
    texts: Vec<String>,
    /// Each slot's path; `None` for a pointer that finds nothing (it does not start with `/`).
    paths: Vec<Option<Vec<Token>>>,
    /// The paths as a tree of their tokens, for the one-pass reading.
    root: Node,
}

#[derive(Debug, Clone, Default)]
struct Node {
    /// Slots whose pointer ends here.
    slots: Vec<usize>,
    /// Slots whose pointer ends here or below, which a repeated member name resets.
    below: Vec<usize>,
    /// How many tokens lead here.
    depth: usize,
    children: Vec<(Token, Node)>,
}

impl Pointers {
    /// Adds a pointer (RFC 6901, as [`Json::pointer`] reads it) and returns its slot.
    pub fn add(&mut self, pointer: &str) -> usize {
        let slot = self.paths.len();
        let path = parse(pointer);
        if let Some(tokens) = &path {
            let mut node = &mut self.root;
            node.below.push(slot);
            for (at, token) in tokens.iter().enumerate() {
                let child = match node.children.iter().position(|(t, _)| t == token) {
                    Some(child) => child,
                    None => {
                        node.children.push((
                            token.clone(),
                            Node {
                                depth: at + 1,
                                ..Node::default()
                            },
                        ));
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[child].1;
                node.below.push(slot);
            }
            node.slots.push(slot);
        }
        self.paths.push(path);
        self.texts.push(pointer.to_string());
        slot
    }

    /// Each slot's path, in slot order (`None`: the pointer finds nothing).
    pub fn paths(&self) -> impl Iterator<Item = Option<&[Token]>> {
        self.paths.iter().map(Option::as_deref)
    }

    /// The pointers, in slot order, as written.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.texts.iter().map(String::as_str)
    }

    /// The value at each slot's pointer in a parsed document.
    pub fn in_document<'a>(&self, document: &'a Json) -> Found<'a> {
        self.paths
            .iter()
            .map(|path| follow(document, path.as_deref()?).map(Cow::Borrowed))
            .collect()
    }

    /// Reads a JSON text as `serde_json::from_str` would (same errors, then [`MapError::TooDeep`]
    /// past MariaDB's depth) and returns the value at each slot's pointer, keeping nothing else.
    pub fn in_text(&self, text: &str) -> Result<Found<'static>, MapError> {
        let mut walk = Walk {
            found: vec![None; self.paths.len()],
            paths: &self.paths,
            deepest: 0,
        };
        let not_json = |e: serde_json::Error| MapError::NotJson(e.to_string());
        let mut de = serde_json::Deserializer::from_str(text);
        At {
            walk: &mut walk,
            node: Some(&self.root),
            depth: 0,
        }
        .deserialize(&mut de)
        .map_err(not_json)?;
        de.end().map_err(not_json)?;
        if walk.deepest > MAX_JSON_DEPTH {
            return Err(MapError::TooDeep);
        }
        Ok(walk.found)
    }
}

/// The state of one pass over a text.
struct Walk<'p> {
    found: Found<'static>,
    paths: &'p [Option<Vec<Token>>],
    /// The deepest nesting seen.
    deepest: usize,
}

/// A value at `depth` levels of nesting, where the tree of pointers is at `node` (`None`: no
/// pointer goes on from here, so the value is only checked).
struct At<'w, 'p, 't> {
    walk: &'w mut Walk<'p>,
    node: Option<&'t Node>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for At<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.node {
            // A pointer ends here: keep the value (and take any pointers below from it).
            Some(node) if !node.slots.is_empty() => {
                let value = Json::deserialize(deserializer)?;
                let walk = self.walk;
                walk.deepest = walk.deepest.max(self.depth + depth(&value));
                for &slot in &node.below {
                    let Some(path) = &walk.paths[slot] else {
                        continue;
                    };
                    // Pointers that end here take the value itself, below.
                    if path.len() > node.depth {
                        walk.found[slot] = follow(&value, &path[node.depth..])
                            .map(|found| Cow::Owned(found.clone()));
                    }
                }
                // The value is moved into the last slot that ends here, not copied (each
                // string column's value is one allocation, not two).
                if let Some((&last, others)) = node.slots.split_last() {
                    for &slot in others {
                        walk.found[slot] = Some(Cow::Owned(value.clone()));
                    }
                    walk.found[last] = Some(Cow::Owned(value));
                }
                Ok(())
            }
            _ => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for At<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        let depth = self.depth + 1;
        self.walk.deepest = self.walk.deepest.max(depth);
        let children = self.node.map_or(&[][..], |n| n.children.as_slice());
        let mut index = 0;
        loop {
            let node = children
                .iter()
                .find(|(token, _)| token.index == Some(index))
                .map(|(_, child)| child);
            let at = At {
                walk: &mut *self.walk,
                node,
                depth,
            };
            if items.next_element_seed(at)?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<(), A::Error> {
        let depth = self.depth + 1;
        self.walk.deepest = self.walk.deepest.max(depth);
        let children = self.node.map_or(&[][..], |n| n.children.as_slice());
        while let Some(child) = fields.next_key_seed(Member(children))? {
            let node = child.map(|c| &children[c].1);
            if let Some(node) = node {
                // A repeated name replaces what an earlier one held, as in a parsed document.
                for &slot in &node.below {
                    self.walk.found[slot] = None;
                }
            }
            fields.next_value_seed(At {
                walk: &mut *self.walk,
                node,
                depth,
            })?;
        }
        Ok(())
    }
}

/// An object member's name, matched against the pointers' next tokens: the index of the child
/// it leads to, if any.
struct Member<'t>(&'t [(Token, Node)]);

impl<'de> DeserializeSeed<'de> for Member<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<usize>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Member<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|(token, _)| token.key == name))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    const POINTERS: &[&str] = &[
        "", "/a", "/a/b", "/a/b/0", "/a/1", "/b", "/c/d~1e", "/c/~0", "/n", "a", "/", "/a/01",
    ];

    fn pointers() -> Pointers {
        let mut pointers = Pointers::default();
        for p in POINTERS {
            pointers.add(p);
        }
        pointers
    }

    /// The one-pass reading beside the parsed document's `pointer`, for one text.
    fn agree(text: &str) {
        let pointers = pointers();
        let parsed: Result<Json, _> = serde_json::from_str(text);
        match (pointers.in_text(text), parsed) {
            (Ok(found), Ok(document)) => {
                assert!(depth(&document) <= MAX_JSON_DEPTH, "{text}");
                for (slot, pointer) in POINTERS.iter().enumerate() {
                    assert_eq!(
                        found[slot].as_deref(),
                        document.pointer(pointer),
                        "{pointer} in {text}"
                    );
                }
                let in_document = pointers.in_document(&document);
                for (slot, pointer) in POINTERS.iter().enumerate() {
                    assert_eq!(
                        in_document[slot].as_deref(),
                        document.pointer(pointer),
                        "{pointer}"
                    );
                }
            }
            (Err(MapError::TooDeep), Ok(document)) => {
                assert!(depth(&document) > MAX_JSON_DEPTH, "{text}");
            }
            (Err(MapError::NotJson(ours)), Err(theirs)) => assert_eq!(ours, theirs.to_string()),
            (ours, theirs) => panic!("{text}: {ours:?} against {theirs:?}"),
        }
    }

    #[test]
    fn finds_what_a_parsed_document_finds() {
        for text in [
            r#"{"a":{"b":[1,2],"x":true},"b":"s","c":{"d/e":1,"~":null},"n":-1.5e3}"#,
            r#"{"a":[{"b":0},{"q":[]}],"b":{"b":{}}}"#,
            r#"{"a":{"b":1},"a":{"c":2}}"#,
            r#"{"a":{"b":1},"a":5,"b":1,"b":[2]}"#,
            r#"{"a":{"01":"no index","1":"key"}}"#,
            r#"{"":"empty name","a":{"b":"\u00e9\n\"q\""}}"#,
            r#"[1,{"a":2}]"#,
            r#""just text""#,
            "  17  ",
            "null",
        ] {
            agree(text);
        }
    }

    #[test]
    fn refuses_what_serde_json_refuses_with_its_message() {
        for text in [
            "",
            "{",
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{"a":"\ud800"}"#,
            r#"{"x":"\ud800"}"#,
            r#"{"x":1e999}"#,
            r#"{"x":[01]}"#,
            "{\"x\":\"\u{0001}\"}",
            &format!("{}{}", "[".repeat(200), "]".repeat(200)),
        ] {
            agree(text);
        }
    }

    #[test]
    fn measures_depth_as_mariadb_limits_it() {
        let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(pointers().in_text(&nested(MAX_JSON_DEPTH)).is_ok());
        assert_eq!(
            pointers().in_text(&nested(MAX_JSON_DEPTH + 1)),
            Err(MapError::TooDeep)
        );
        // Deep inside a value a pointer keeps, and inside one it skips.
        let kept = json!({"a": {"b": serde_json::from_str::<Json>(&nested(30)).unwrap()}});
        assert_eq!(
            pointers().in_text(&kept.to_string()),
            Err(MapError::TooDeep)
        );
        let mut only_a = Pointers::default();
        only_a.add("/a");
        let skipped = |n| json!({"z": serde_json::from_str::<Json>(&nested(n)).unwrap()});
        assert!(only_a.in_text(&skipped(30).to_string()).is_ok());
        assert_eq!(
            only_a.in_text(&skipped(31).to_string()),
            Err(MapError::TooDeep)
        );
    }

    /// JSON texts whose objects may repeat member names, as a message's may.
    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            any::<bool>().prop_map(|b| b.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            "[ab~/]{0,2}".prop_map(|s| Json::from(s).to_string()),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                prop::collection::vec(("[abc01~/]{0,2}|d/e", inner), 0..4).prop_map(|members| {
                    let members: Vec<String> = members
                        .iter()
                        .map(|(name, value)| format!("{}:{value}", Json::from(name.as_str())))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn agrees_with_serde_json_on_any_document(text in json_text()) {
            agree(&text);
        }
    }
}
