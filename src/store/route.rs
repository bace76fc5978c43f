//! Routing: which of the fan-out tables (`[[store.tables]]`) a record also goes to, decided by
//! conditions on its normalized document. Pure.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// One test on the document; every part given must hold. A table's `when` is a list of these,
/// all of which must hold (an empty list routes every record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// Where the value is (RFC 6901).
    pub pointer: String,
    /// The value equals one of these (strings, numbers or booleans, compared by JSON value:
    /// `500` matches the number 500, not the string "500").
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<Json>>,
    /// The value is present and not null (true), or absent or null (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// The value is a number at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// The value is a number at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

impl Condition {
    /// Mistakes in the condition itself, found when settings load.
    pub fn check(&self) -> Result<(), String> {
        if !self.pointer.starts_with('/') {
            return Err(format!(
                "condition pointer {:?} must start with /",
                self.pointer
            ));
        }
        if self.one_of.is_none()
            && self.exists.is_none()
            && self.min.is_none()
            && self.max.is_none()
        {
            return Err(format!(
                "condition on {} needs one of in, exists, min or max",
                self.pointer
            ));
        }
        if let Some(values) = &self.one_of {
            if values.is_empty() {
                return Err(format!("condition on {}: in is empty", self.pointer));
            }
            if let Some(bad) = values.iter().find(|v| v.is_array() || v.is_object()) {
                return Err(format!(
                    "condition on {}: in takes strings, numbers or booleans, not {bad}",
                    self.pointer
                ));
            }
        }
        if let (Some(min), Some(max)) = (self.min, self.max)
            && min > max
        {
            return Err(format!(
                "condition on {}: min {min} is above max {max}",
                self.pointer
            ));
        }
        Ok(())
    }

    pub fn holds(&self, document: &Json) -> bool {
        self.holds_value(document.pointer(&self.pointer))
    }

    /// Whether the condition holds of the value found at its pointer (`None`: none there).
    pub fn holds_value(&self, value: Option<&Json>) -> bool {
        let value = value.filter(|v| !v.is_null());
        if let Some(exists) = self.exists
            && exists != value.is_some()
        {
            return false;
        }
        if let Some(values) = &self.one_of
            && !value.is_some_and(|v| values.iter().any(|wanted| same(v, wanted)))
        {
            return false;
        }
        if self.min.is_some() || self.max.is_some() {
            let Some(number) = value.and_then(Json::as_f64) else {
                return false;
            };
            if self.min.is_some_and(|min| number < min) || self.max.is_some_and(|max| number > max)
            {
                return false;
            }
        }
        true
    }
}

/// JSON equality, with numbers compared by value (`5` equals `5.0`; config numbers arrive as
/// integers or floats depending on how they were written).
fn same(value: &Json, wanted: &Json) -> bool {
    match (value, wanted) {
        (Json::Number(a), Json::Number(b)) => {
            match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
                (Some(a), Some(b), _, _) => a == b,
                (_, _, Some(a), Some(b)) => a == b,
                _ => a.as_f64().is_some_and(|a| b.as_f64() == Some(a)),
            }
        }
        _ => value == wanted,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn condition(pointer: &str) -> Condition {
        Condition {
            pointer: pointer.into(),
            one_of: None,
            exists: None,
            min: None,
            max: None,
        }
    }

    #[test]
    fn in_compares_json_values() {
        let levels = Condition {
            one_of: Some(vec![json!("error"), json!("fatal")]),
            ..condition("/level")
        };
        assert!(levels.holds(&json!({"level": "error"})));
        assert!(levels.holds(&json!({"level": "fatal"})));
        assert!(!levels.holds(&json!({"level": "warn"})));
        assert!(!levels.holds(&json!({"level": null})));
        assert!(!levels.holds(&json!({})));
        let statuses = Condition {
            one_of: Some(vec![json!(500), json!(502.0)]),
            ..condition("/http/status")
        };
        assert!(statuses.holds(&json!({"http": {"status": 500}})));
        assert!(statuses.holds(&json!({"http": {"status": 502}})));
        assert!(!statuses.holds(&json!({"http": {"status": "500"}})));
        assert!(!statuses.holds(&json!({"http": {"status": 501}})));
    }

    #[test]
    fn exists_min_and_max() {
        let http = Condition {
            exists: Some(true),
            ..condition("/http")
        };
        assert!(http.holds(&json!({"http": {}})));
        assert!(!http.holds(&json!({"http": null})));
        assert!(!http.holds(&json!({})));
        let absent = Condition {
            exists: Some(false),
            ..condition("/http")
        };
        assert!(absent.holds(&json!({})));
        assert!(!absent.holds(&json!({"http": 1})));
        let errors = Condition {
            min: Some(500.0),
            max: Some(599.0),
            ..condition("/status")
        };
        assert!(errors.holds(&json!({"status": 500})));
        assert!(errors.holds(&json!({"status": 599})));
        assert!(!errors.holds(&json!({"status": 499})));
        assert!(!errors.holds(&json!({"status": 600})));
        assert!(!errors.holds(&json!({"status": "550"})));
        assert!(!errors.holds(&json!({})));
    }

    #[test]
    fn all_must_hold() {
        let conditions = [
            Condition {
                exists: Some(true),
                ..condition("/http")
            },
            Condition {
                min: Some(500.0),
                ..condition("/http/status")
            },
        ];
        let all_hold = |conditions: &[Condition], document: Json| {
            conditions.iter().all(|c| c.holds(&document))
        };
        assert!(all_hold(&conditions, json!({"http": {"status": 503}})));
        assert!(!all_hold(&conditions, json!({"http": {"status": 200}})));
        assert!(all_hold(&[], json!({})));
    }

    #[test]
    fn bad_conditions_are_refused() {
        assert!(condition("/a").check().is_err());
        assert!(
            Condition {
                exists: Some(true),
                ..condition("a")
            }
            .check()
            .is_err()
        );
        assert!(
            Condition {
                one_of: Some(vec![]),
                ..condition("/a")
            }
            .check()
            .is_err()
        );
        assert!(
            Condition {
                one_of: Some(vec![json!([1])]),
                ..condition("/a")
            }
            .check()
            .is_err()
        );
        assert!(
            Condition {
                min: Some(2.0),
                max: Some(1.0),
                ..condition("/a")
            }
            .check()
            .is_err()
        );
    }
}
