//! SQL identifiers from configuration: validated once, always quoted.

use std::fmt;
use std::str::FromStr;

/// MySQL's limit on table and column name length.
const MAX_LEN: usize = 64;

/// A table or column name that is safe to splice into SQL: ASCII letters, digits and `_`,
/// not starting with a digit, at most 64 characters. Displayed quoted with backticks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ident(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a valid SQL name: use 1 to 64 ASCII letters, digits and _, not starting with a digit"
)]
pub struct IdentError(String);

impl Ident {
    pub fn new(name: &str) -> Result<Ident, IdentError> {
        let valid = !name.is_empty()
            && name.len() <= MAX_LEN
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if valid {
            Ok(Ident(name.to_string()))
        } else {
            Err(IdentError(name.to_string()))
        }
    }

    /// The bare name, for messages and catalog lookups (bound as a value, never spliced).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Ident {
    type Err = IdentError;

    fn from_str(s: &str) -> Result<Ident, IdentError> {
        Ident::new(s)
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_names_and_quotes_them() {
        assert_eq!(Ident::new("logs_2").unwrap().to_string(), "`logs_2`");
    }

    #[test]
    fn refuses_anything_that_could_change_sql() {
        for bad in [
            "",
            "1logs",
            "lo`gs",
            "logs;drop",
            "a b",
            "naïve",
            &"x".repeat(65),
        ] {
            assert!(Ident::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
