//! The `[[normalize]]` settings: rule sets of steps applied to each message's document before
//! its columns are mapped. Checked and compiled once into a [`super::Normalizer`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One `[[normalize]]` rule set: steps applied in order to the documents of some topics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NormalizeRule {
    /// Topics the set applies to; empty: every topic.
    #[serde(default)]
    pub topics: Vec<String>,
    pub steps: Vec<NormalizeStep>,
}

/// One step of a rule set. Fields are JSON pointers (RFC 6901) into the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum NormalizeStep {
    /// Moves a value, if present.
    Rename { from: String, to: String },
    /// Copies a value, if present.
    Extract { from: String, to: String },
    /// Removes a value, if present.
    Drop { field: String },
    /// Sets a value where it is missing or null.
    Default {
        field: String,
        value: serde_json::Value,
    },
    /// Lowercases a string.
    Lowercase { field: String },
    /// Replaces a string (or a number's or boolean's text) found in `values`.
    Map {
        field: String,
        values: BTreeMap<String, String>,
    },
    /// Reads a time in the first of `formats` that matches and writes it as RFC 3339 UTC.
    Time {
        field: String,
        formats: Vec<String>,
        /// Zone of times written without an offset.
        #[serde(default = "utc_name")]
        zone: String,
    },
    /// Fails where the value is missing or null.
    Require { field: String },
}

fn utc_name() -> String {
    "UTC".to_string()
}
