use proptest::prelude::*;
use serde_json::{Value as Json, json};

use super::*;

/// Rule sets written as the settings' JSON equivalent of `[[normalize]]`.
fn rules(sets: Json) -> Vec<NormalizeRule> {
    serde_json::from_value(sets).unwrap()
}

/// A normalizer of one rule set for every topic, with these steps.
fn steps(steps: Json) -> Normalizer {
    Normalizer::compile(rules(json!([{ "steps": steps }]))).unwrap()
}

/// The document after the steps, and whether they changed it.
fn run(normalizer: &Normalizer, document: Json) -> (Json, bool) {
    let mut document = document;
    let changed = normalizer.apply("logs", &mut document).unwrap();
    (document, changed)
}

/// The failing rule's (set, step, reason).
fn fails(normalizer: &Normalizer, document: Json) -> (usize, usize, String) {
    let mut document = document;
    match normalizer.apply("logs", &mut document) {
        Err(MapError::Rule {
            set, step, reason, ..
        }) => (set, step, reason),
        other => panic!("not a rule error: {other:?}"),
    }
}

fn time(formats: &[&str], zone: &str) -> Normalizer {
    steps(json!([{ "op": "time", "field": "/t", "formats": formats, "zone": zone }]))
}

fn time_of(normalizer: &Normalizer, value: Json) -> Json {
    run(normalizer, json!({ "t": value })).0["t"].clone()
}

#[test]
fn rename_moves_a_value_and_creates_intermediate_objects() {
    let n = steps(json!([{ "op": "rename", "from": "/lvl", "to": "/meta/level" }]));
    assert_eq!(
        run(&n, json!({ "lvl": "WARN", "x": 1 })),
        (json!({ "meta": { "level": "WARN" }, "x": 1 }), true)
    );
    assert_eq!(
        run(&n, json!({ "x": 1, "meta": null })),
        (json!({ "x": 1, "meta": null }), false)
    );
    // A null intermediate is treated as missing.
    assert_eq!(
        run(&n, json!({ "lvl": 1, "meta": null })).0,
        json!({ "meta": { "level": 1 } })
    );
}

#[test]
fn extract_copies_a_nested_value_and_keeps_the_source() {
    let n = steps(json!([{ "op": "extract", "from": "/context/trace/id", "to": "/trace_id" }]));
    let doc = json!({ "context": { "trace": { "id": "abc" } } });
    assert_eq!(
        run(&n, doc),
        (
            json!({ "context": { "trace": { "id": "abc" } }, "trace_id": "abc" }),
            true
        )
    );
    assert_eq!(
        run(&n, json!({ "context": 3 })),
        (json!({ "context": 3 }), false)
    );
}

#[test]
fn drop_removes_a_value_if_present() {
    let n = steps(json!([{ "op": "drop", "field": "/debug/x" }]));
    assert_eq!(
        run(&n, json!({ "debug": { "x": 1, "y": 2 } })),
        (json!({ "debug": { "y": 2 } }), true)
    );
    assert_eq!(
        run(&n, json!({ "debug": 1 })),
        (json!({ "debug": 1 }), false)
    );
}

#[test]
fn default_sets_missing_or_null_values_only() {
    let n = steps(json!([
        { "op": "default", "field": "/level", "value": "info" },
        { "op": "default", "field": "/tags", "value": { "a": [1, 2.5, true] } },
    ]));
    assert_eq!(
        run(&n, json!({})),
        (
            json!({ "level": "info", "tags": { "a": [1, 2.5, true] } }),
            true
        )
    );
    assert_eq!(
        run(&n, json!({ "level": null, "tags": 0 })).0["level"],
        "info"
    );
    assert_eq!(
        run(&n, json!({ "level": "debug", "tags": 0 })),
        (json!({ "level": "debug", "tags": 0 }), false)
    );
}

#[test]
fn lowercase_takes_strings_only() {
    let n = steps(json!([{ "op": "lowercase", "field": "/level" }]));
    assert_eq!(
        run(&n, json!({ "level": "WARN Ü" })),
        (json!({ "level": "warn ü" }), true)
    );
    assert_eq!(
        run(&n, json!({ "level": "WARN" })),
        (json!({ "level": "warn" }), true)
    );
    assert!(!run(&n, json!({ "level": "warn" })).1);
    assert!(!run(&n, json!({ "level": "ü" })).1);
    assert!(!run(&n, json!({ "level": null })).1);
    assert!(!run(&n, json!({})).1);
    let (set, step, reason) = fails(&n, json!({ "level": 3 }));
    assert_eq!((set, step), (0, 0));
    assert_eq!(reason, "expected a string, got a number");
}

#[test]
fn map_replaces_known_values_and_keeps_the_others() {
    let n = steps(json!([{
        "op": "map", "field": "/level",
        "values": { "warning": "warn", "err": "error", "3": "error", "true": "yes" }
    }]));
    assert_eq!(
        run(&n, json!({ "level": "warning" })),
        (json!({ "level": "warn" }), true)
    );
    assert_eq!(
        run(&n, json!({ "level": 3 })).0,
        json!({ "level": "error" })
    );
    assert_eq!(
        run(&n, json!({ "level": true })).0,
        json!({ "level": "yes" })
    );
    assert_eq!(
        run(&n, json!({ "level": "info" })),
        (json!({ "level": "info" }), false)
    );
    assert_eq!(
        run(&n, json!({ "level": 4 })),
        (json!({ "level": 4 }), false)
    );
    let (_, _, reason) = fails(&n, json!({ "level": ["warning"] }));
    assert!(reason.contains("an array"), "{reason}");
}

#[test]
fn require_fails_on_missing_or_null() {
    let n = steps(json!([{ "op": "require", "field": "/message" }]));
    assert!(!run(&n, json!({ "message": "" })).1);
    assert_eq!(fails(&n, json!({})).2, "missing");
    assert_eq!(fails(&n, json!({ "message": null })).2, "null");
}

#[test]
fn time_reads_rfc3339_in_any_offset_as_utc_with_milliseconds() {
    let n = time(&["rfc3339"], "UTC");
    assert_eq!(
        time_of(&n, json!("2026-11-21T10:00:00.123456+08:00")),
        "2026-11-21T02:00:00.123Z"
    );
    assert_eq!(
        time_of(&n, json!("2026-11-21T02:00:00Z")),
        "2026-11-21T02:00:00.000Z"
    );
    // Already normal: unchanged.
    let (_, changed) = run(&n, json!({ "t": "2026-11-21T02:00:00.123Z" }));
    assert!(!changed);
}

#[test]
fn time_reads_epoch_seconds_from_numbers_and_digit_strings() {
    let n = time(&["epoch_seconds"], "UTC");
    assert_eq!(
        time_of(&n, json!(1_795_226_400)),
        "2026-11-21T02:00:00.000Z"
    );
    assert_eq!(
        time_of(&n, json!(1_795_226_400.123)),
        "2026-11-21T02:00:00.123Z"
    );
    assert_eq!(time_of(&n, json!("1795226400")), "2026-11-21T02:00:00.000Z");
    assert_eq!(
        time_of(&n, json!("1795226400.1239")),
        "2026-11-21T02:00:00.123Z"
    );
    assert_eq!(time_of(&n, json!(-1)), "1969-12-31T23:59:59.000Z");
    assert_eq!(time_of(&n, json!("-0.5")), "1969-12-31T23:59:59.500Z");
    for bad in ["", "1e9", "+1", "1.", " 1", "0x10"] {
        fails(&n, json!({ "t": bad }));
    }
}

#[test]
fn time_reads_epoch_millis_from_integers_and_digit_strings() {
    let n = time(&["epoch_millis"], "UTC");
    assert_eq!(
        time_of(&n, json!(1_795_226_400_123u64)),
        "2026-11-21T02:00:00.123Z"
    );
    assert_eq!(
        time_of(&n, json!("1795226400123")),
        "2026-11-21T02:00:00.123Z"
    );
    let (_, _, reason) = fails(&n, json!({ "t": 1.5 }));
    assert_eq!(
        reason,
        "a number 1.5 matches none of the formats epoch_millis"
    );
}

#[test]
fn time_patterns_are_read_in_the_zone() {
    let pattern = "%Y-%m-%d %H:%M:%S%.f";
    assert_eq!(
        time_of(&time(&[pattern], "UTC"), json!("2026-11-21 02:00:00.5")),
        "2026-11-21T02:00:00.500Z"
    );
    assert_eq!(
        time_of(&time(&[pattern], "+08:00"), json!("2026-11-21 10:00:00")),
        "2026-11-21T02:00:00.000Z"
    );
    assert_eq!(
        time_of(
            &time(&[pattern], "Asia/Shanghai"),
            json!("2026-11-21 10:00:00.123")
        ),
        "2026-11-21T02:00:00.123Z"
    );
    // A pattern with its own offset ignores the zone; a date alone is midnight in the zone.
    assert_eq!(
        time_of(
            &time(&["%d/%m/%Y %H:%M %z"], "Asia/Shanghai"),
            json!("21/11/2026 02:00 +0000")
        ),
        "2026-11-21T02:00:00.000Z"
    );
    assert_eq!(
        time_of(&time(&["%Y-%m-%d"], "+08:00"), json!("2026-11-21")),
        "2026-11-20T16:00:00.000Z"
    );
}

#[test]
fn time_in_daylight_saving_zones_takes_the_earlier_of_a_repeated_hour_and_the_end_of_a_gap() {
    let n = time(&["%Y-%m-%d %H:%M"], "America/New_York");
    // Summer (EDT, -4) and winter (EST, -5).
    assert_eq!(
        time_of(&n, json!("2026-07-01 12:00")),
        "2026-07-01T16:00:00.000Z"
    );
    assert_eq!(
        time_of(&n, json!("2026-12-01 12:00")),
        "2026-12-01T17:00:00.000Z"
    );
    // 01:30 happens twice on 2026-11-01: the first, still EDT.
    assert_eq!(
        time_of(&n, json!("2026-11-01 01:30")),
        "2026-11-01T05:30:00.000Z"
    );
    // 02:30 never happens on 2026-03-08: clocks jump to 03:00 EDT.
    assert_eq!(
        time_of(&n, json!("2026-03-08 02:30")),
        "2026-03-08T07:00:00.000Z"
    );
}

#[test]
fn time_formats_are_tried_in_order() {
    let n = time(
        &[
            "rfc3339",
            "%Y-%m-%d %H:%M:%S",
            "epoch_seconds",
            "epoch_millis",
        ],
        "UTC",
    );
    assert_eq!(
        time_of(&n, json!("2026-11-21T02:00:00Z")),
        "2026-11-21T02:00:00.000Z"
    );
    assert_eq!(
        time_of(&n, json!("2026-11-21 02:00:00")),
        "2026-11-21T02:00:00.000Z"
    );
    assert_eq!(
        time_of(&n, json!(1_795_226_400)),
        "2026-11-21T02:00:00.000Z"
    );
    // epoch_seconds comes first, so a millisecond value is a time far in the future.
    let (_, _, reason) = fails(&n, json!({ "t": 1_795_226_400_123u64 }));
    assert!(reason.contains("outside 0000 to 9999"), "{reason}");
}

#[test]
fn time_leaves_missing_and_null_alone_and_names_what_did_not_match() {
    let n = time(&["rfc3339", "epoch_millis"], "UTC");
    assert_eq!(run(&n, json!({})), (json!({}), false));
    assert_eq!(run(&n, json!({ "t": null })), (json!({ "t": null }), false));
    let (set, step, reason) = fails(&n, json!({ "t": "yesterday" }));
    assert_eq!((set, step), (0, 0));
    assert_eq!(
        reason,
        "a string \"yesterday\" matches none of the formats rfc3339, epoch_millis"
    );
    assert_eq!(
        fails(&n, json!({ "t": { "a": 1 } })).2,
        "an object matches none of the formats rfc3339, epoch_millis"
    );
    assert_eq!(
        fails(&n, json!({ "t": true })).2,
        "a boolean true matches none of the formats rfc3339, epoch_millis"
    );
    // Huge values are clipped in the reason.
    let huge = "x".repeat(100_000);
    let reason = fails(&n, json!({ "t": huge })).2;
    assert!(reason.len() < 200, "{reason}");
    // An impossible date.
    fails(&n, json!({ "t": "2026-02-30T00:00:00Z" }));
}

#[test]
fn writing_through_a_non_object_fails_the_rule() {
    let n = steps(json!([
        { "op": "drop", "field": "/x" },
        { "op": "extract", "from": "/id", "to": "/a/b/c" },
    ]));
    let (set, step, reason) = fails(&n, json!({ "id": 1, "a": { "b": "text" } }));
    assert_eq!((set, step), (0, 1));
    assert_eq!(
        reason,
        "cannot write /a/b/c: /a/b is a string, not an object"
    );
    let (_, _, reason) = fails(&n, json!({ "id": 1, "a": 5 }));
    assert_eq!(reason, "cannot write /a/b/c: /a is a number, not an object");
    let n = steps(json!([{ "op": "default", "field": "/a", "value": 1 }]));
    // The document itself is an array: the member cannot be written.
    let mut doc = json!([1]);
    assert!(n.apply("logs", &mut doc).is_err());
}

#[test]
fn arrays_are_indexed_for_reads_and_for_writes_to_existing_elements() {
    let n = steps(json!([
        { "op": "extract", "from": "/tags/1", "to": "/second" },
        { "op": "lowercase", "field": "/tags/0" },
        { "op": "default", "field": "/items/0/n", "value": 0 },
    ]));
    assert_eq!(
        run(&n, json!({ "tags": ["A", "b"], "items": [{}] })).0,
        json!({ "tags": ["a", "b"], "items": [{ "n": 0 }], "second": "b" })
    );
    let (_, step, reason) = fails(&n, json!({ "tags": [], "items": [] }));
    assert_eq!(step, 2);
    assert_eq!(
        reason,
        "cannot write /items/0/n: /items is an array of 0 items without element \"0\""
    );
}

#[test]
fn escaped_pointer_tokens_name_keys_with_slashes_and_tildes() {
    let n = steps(json!([{ "op": "rename", "from": "/a~1b", "to": "/c~0d" }]));
    assert_eq!(run(&n, json!({ "a/b": 1 })).0, json!({ "c~d": 1 }));
}

#[test]
fn rule_sets_apply_to_their_topics_in_order() {
    let rules = rules(json!([
        { "topics": ["logs", "audit"], "steps": [{ "op": "rename", "from": "/L", "to": "/level" }] },
        { "steps": [{ "op": "lowercase", "field": "/level" }] },
        { "topics": ["audit"], "steps": [{ "op": "require", "field": "/user" }] },
    ]));
    let n = Normalizer::compile(rules).unwrap();
    assert!(n.applies_to("logs") && n.applies_to("audit") && n.applies_to("other"));

    // Set 0 renames before set 1 lowercases.
    let mut doc = json!({ "L": "WARN" });
    assert_eq!(n.apply("logs", &mut doc), Ok(true));
    assert_eq!(doc, json!({ "level": "warn" }));

    // Only set 1 applies to other topics.
    let mut doc = json!({ "L": "WARN", "level": "ERROR" });
    assert_eq!(n.apply("other", &mut doc), Ok(true));
    assert_eq!(doc, json!({ "L": "WARN", "level": "error" }));

    // Set 2 applies to audit only, and its error names it.
    let mut doc = json!({ "L": "x" });
    let e = n.apply("audit", &mut doc).unwrap_err();
    assert_eq!(
        e,
        MapError::Rule {
            set: 2,
            step: 0,
            op: "require",
            field: "/user".into(),
            reason: "missing".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "normalize[2].steps[0] (require /user): missing"
    );
}

#[test]
fn applies_to_is_false_without_a_matching_set() {
    assert!(!Normalizer::compile(Vec::new()).unwrap().applies_to("logs"));
    let n = Normalizer::compile(rules(json!([
        { "topics": ["audit"], "steps": [{ "op": "drop", "field": "/x" }] }
    ])))
    .unwrap();
    assert!(!n.applies_to("logs"));
    assert!(n.applies_to("audit"));
    let mut doc = json!({ "x": 1 });
    assert_eq!(n.apply("logs", &mut doc), Ok(false));
    assert_eq!(doc, json!({ "x": 1 }));
}

#[test]
fn compiling_refuses_bad_steps_naming_set_step_and_problem() {
    let refused = |set: Json| -> RuleError {
        let rules = rules(json!([{ "steps": [{ "op": "drop", "field": "/ok" }] }, set]));
        Normalizer::compile(rules).unwrap_err()
    };
    let e = refused(json!({ "steps": [{ "op": "drop", "field": "x" }] }));
    assert_eq!((e.set, e.step), (1, Some(0)));
    assert!(e.reason.contains("start it with /"), "{}", e.reason);
    let e = refused(json!({ "steps": [{ "op": "drop", "field": "/a~2" }] }));
    assert!(e.reason.contains("~ must be followed"), "{}", e.reason);
    let e = refused(json!({ "steps": [
        { "op": "drop", "field": "/a" },
        { "op": "time", "field": "/t", "formats": ["%Y-%Q"] },
    ] }));
    assert_eq!(e.step, Some(1));
    assert!(
        e.reason.contains("not a valid strftime pattern"),
        "{}",
        e.reason
    );
    let e = refused(json!({ "steps": [{ "op": "time", "field": "/t", "formats": ["iso"] }] }));
    assert!(e.reason.contains("\"iso\""), "{}", e.reason);
    let e = refused(json!({ "steps": [{ "op": "time", "field": "/t", "formats": [] }] }));
    assert!(e.reason.contains("at least one format"), "{}", e.reason);
    let e = refused(json!({ "steps": [
        { "op": "time", "field": "/t", "formats": ["rfc3339"], "zone": "Mars/Olympus" }
    ] }));
    assert!(e.reason.contains("unknown time zone"), "{}", e.reason);
    let e = refused(json!({ "steps": [{ "op": "default", "field": "/t", "value": null }] }));
    assert!(
        e.reason.contains("not representable as JSON"),
        "{}",
        e.reason
    );
    let deep = "/a".repeat(MAX_JSON_DEPTH + 1);
    let e = refused(json!({ "steps": [{ "op": "require", "field": deep }] }));
    assert!(e.reason.contains("deeper than"), "{}", e.reason);
    let e = refused(json!({ "steps": [] }));
    assert_eq!((e.set, e.step), (1, None));
    let e = refused(json!({ "topics": [""], "steps": [{ "op": "drop", "field": "/x" }] }));
    assert_eq!((e.set, e.step), (1, None));
}

fn any_json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        any::<f64>().prop_map(Json::from),
        "[a-zA-Z0-9 :.+-]{0,24}".prop_map(Json::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::from),
            prop::collection::btree_map("[a-c]", inner, 0..4)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn random_documents_never_panic(doc in any_json()) {
        let n = steps(json!([
            { "op": "rename", "from": "/a", "to": "/b/c" },
            { "op": "extract", "from": "/b/0", "to": "/c/a" },
            { "op": "drop", "field": "/c/b" },
            { "op": "default", "field": "/a/b", "value": [1] },
            { "op": "lowercase", "field": "/b/c" },
            { "op": "map", "field": "/c/a", "values": { "x": "y" } },
            { "op": "time", "field": "/b/a", "formats":
                ["rfc3339", "%Y-%m-%d %H:%M:%S", "epoch_seconds", "epoch_millis"],
              "zone": "America/New_York" },
        ]));
        let mut doc = doc;
        let _ = n.apply("logs", &mut doc);
    }
}
